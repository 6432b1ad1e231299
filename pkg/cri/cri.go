// Package cri asks a container runtime over the Container Runtime
// Interface (CRI v1, gRPC on a unix socket) whether it is ready for the
// kubelet: the checks kubeadm's preflight makes, with the caller's
// deadline instead of kubeadm's fixed two seconds.
package cri

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Info is what a ready runtime says about itself.
type Info struct {
	// RuntimeName and RuntimeVersion, e.g. "containerd" and "v2.3.7".
	RuntimeName, RuntimeVersion string
	// APIVersion is the CRI version the runtime speaks ("v1").
	APIVersion string
	// CgroupDriver is the cgroup driver the runtime reports through the
	// RuntimeConfig call ("systemd" or "cgroupfs").
	CgroupDriver string
}

func (i Info) String() string {
	return fmt.Sprintf("%s %s (CRI %s, cgroup driver %s)", i.RuntimeName, i.RuntimeVersion, i.APIVersion, i.CgroupDriver)
}

// Check connects to the runtime at endpoint (a path or a unix:// URL) and
// asks what kubeadm's CRI and ContainerRuntimeVersion preflight checks and
// the kubelet ask: the v1 RuntimeService answers Version, its Status has
// RuntimeReady true (NetworkReady may be false: no pod network exists
// before the node joins), and it implements RuntimeConfig, from which the
// kubelet takes the cgroup driver. ctx bounds the whole check.
func Check(ctx context.Context, endpoint string) (Info, error) {
	target := endpoint
	if !strings.HasPrefix(target, "unix://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Info{}, fmt.Errorf("connect to the container runtime at %s: %w", endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)

	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		return Info{}, fmt.Errorf("ask the container runtime at %s for its CRI v1 version: %w", endpoint, err)
	}
	info := Info{RuntimeName: v.RuntimeName, RuntimeVersion: v.RuntimeVersion, APIVersion: v.RuntimeApiVersion}

	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return info, fmt.Errorf("ask %s at %s for its status: %w", info.RuntimeName, endpoint, err)
	}
	ready := false
	for _, c := range st.GetStatus().GetConditions() {
		if c.GetType() == runtimeapi.RuntimeReady {
			if !c.GetStatus() {
				return info, fmt.Errorf("%s at %s is not ready: %s %s", info.RuntimeName, endpoint, c.GetReason(), c.GetMessage())
			}
			ready = true
		}
	}
	if !ready {
		return info, fmt.Errorf("%s at %s reports no %s condition", info.RuntimeName, endpoint, runtimeapi.RuntimeReady)
	}

	rc, err := rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if status.Code(err) == codes.Unimplemented {
		return info, fmt.Errorf("%s at %s does not implement the CRI RuntimeConfig call the kubelet takes its cgroup driver from: it is too old for this Kubernetes", info.RuntimeName, endpoint)
	}
	if err != nil {
		return info, fmt.Errorf("ask %s at %s for its runtime config: %w", info.RuntimeName, endpoint, err)
	}
	switch rc.GetLinux().GetCgroupDriver() {
	case runtimeapi.CgroupDriver_SYSTEMD:
		info.CgroupDriver = "systemd"
	case runtimeapi.CgroupDriver_CGROUPFS:
		info.CgroupDriver = "cgroupfs"
	default:
		return info, fmt.Errorf("%s at %s reports an unknown cgroup driver %v", info.RuntimeName, endpoint, rc.GetLinux().GetCgroupDriver())
	}
	return info, nil
}
