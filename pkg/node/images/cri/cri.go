// Package cri talks to a container runtime over the Container Runtime
// Interface (CRI v1, gRPC on a unix socket) the way the kubelet and
// kubeadm do: whether it is ready for the kubelet (the checks of kubeadm's
// preflight, with the caller's deadline instead of kubeadm's fixed two
// seconds), and pulling images.
package cri

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// Client is a connection to one runtime's CRI endpoint.
type Client struct {
	endpoint string
	conn     *grpc.ClientConn
	runtime  runtimeapi.RuntimeServiceClient
	images   runtimeapi.ImageServiceClient
}

// New returns a client of the runtime at endpoint (a path or a unix://
// URL). It connects on first use.
func New(endpoint string) (*Client, error) {
	target := endpoint
	if !strings.HasPrefix(target, "unix://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to the container runtime at %s: %w", endpoint, err)
	}
	return &Client{endpoint: endpoint, conn: conn,
		runtime: runtimeapi.NewRuntimeServiceClient(conn), images: runtimeapi.NewImageServiceClient(conn)}, nil
}

// Close drops the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Check connects to the runtime at endpoint and reports whether it is
// ready for the kubelet (see Client.Check).
func Check(ctx context.Context, endpoint string) (Info, error) {
	c, err := New(endpoint)
	if err != nil {
		return Info{}, err
	}
	defer c.Close()
	return c.Check(ctx)
}

// Check asks what kubeadm's CRI and ContainerRuntimeVersion preflight
// checks and the kubelet ask: the v1 RuntimeService answers Version, its
// Status has RuntimeReady true (NetworkReady may be false: no pod network
// exists before the node joins), and it implements RuntimeConfig, from
// which the kubelet takes the cgroup driver. ctx bounds the whole check.
func (c *Client) Check(ctx context.Context) (Info, error) {
	v, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		return Info{}, fmt.Errorf("ask the container runtime at %s for its CRI v1 version: %w", c.endpoint, err)
	}
	info := Info{RuntimeName: v.RuntimeName, RuntimeVersion: v.RuntimeVersion, APIVersion: v.RuntimeApiVersion}

	st, err := c.runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return info, fmt.Errorf("ask %s at %s for its status: %w", info.RuntimeName, c.endpoint, err)
	}
	ready := false
	for _, cond := range st.GetStatus().GetConditions() {
		if cond.GetType() == runtimeapi.RuntimeReady {
			if !cond.GetStatus() {
				return info, fmt.Errorf("%s at %s is not ready: %s %s", info.RuntimeName, c.endpoint, cond.GetReason(), cond.GetMessage())
			}
			ready = true
		}
	}
	if !ready {
		return info, fmt.Errorf("%s at %s reports no %s condition", info.RuntimeName, c.endpoint, runtimeapi.RuntimeReady)
	}

	rc, err := c.runtime.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if status.Code(err) == codes.Unimplemented {
		return info, fmt.Errorf("%s at %s does not implement the CRI RuntimeConfig call the kubelet takes its cgroup driver from: it is too old for this Kubernetes", info.RuntimeName, c.endpoint)
	}
	if err != nil {
		return info, fmt.Errorf("ask %s at %s for its runtime config: %w", info.RuntimeName, c.endpoint, err)
	}
	switch rc.GetLinux().GetCgroupDriver() {
	case runtimeapi.CgroupDriver_SYSTEMD:
		info.CgroupDriver = "systemd"
	case runtimeapi.CgroupDriver_CGROUPFS:
		info.CgroupDriver = "cgroupfs"
	default:
		return info, fmt.Errorf("%s at %s reports an unknown cgroup driver %v", info.RuntimeName, c.endpoint, rc.GetLinux().GetCgroupDriver())
	}
	return info, nil
}

// Pull makes ref (e.g. "registry.k8s.io/pause:3.10.2") present in the
// runtime, as the kubelet would before starting a container from it, and
// reports whether it had to pull: an image already present is not pulled
// again. Where the runtime pulls from is its own configuration (for
// containerd, its registry hosts).
func (c *Client) Pull(ctx context.Context, ref string) (pulled bool, err error) {
	spec := &runtimeapi.ImageSpec{Image: ref}
	st, err := c.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
	if err != nil {
		return false, fmt.Errorf("ask the container runtime at %s about %s: %w", c.endpoint, ref, err)
	}
	if st.GetImage() != nil {
		return false, nil
	}
	if _, err := c.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec}); err != nil {
		return false, fmt.Errorf("pull %s through the container runtime at %s: %w", ref, c.endpoint, err)
	}
	return true, nil
}

// containerNameLabel is the label the kubelet puts on every container it
// creates, naming the container as the pod spec does.
const containerNameLabel = "io.kubernetes.container.name"

// Running reports whether a container the kubelet created under name
// (the pod spec's container name, e.g. "kube-proxy") is running.
func (c *Client) Running(ctx context.Context, name string) (bool, error) {
	cs, err := c.running(ctx, name)
	return len(cs) > 0, err
}

// running lists the running containers the kubelet created under name.
func (c *Client) running(ctx context.Context, name string) ([]*runtimeapi.Container, error) {
	resp, err := c.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{containerNameLabel: name},
	}})
	if err != nil {
		return nil, fmt.Errorf("ask the container runtime at %s for running %s containers: %w", c.endpoint, name, err)
	}
	return resp.GetContainers(), nil
}

// Created is when the running container the kubelet created under name
// was created (the newest, should there be two), and the zero time when
// none runs. A container reads its files when it starts, so one created
// before a file was written has not read it.
func (c *Client) Created(ctx context.Context, name string) (time.Time, error) {
	cs, err := c.running(ctx, name)
	if err != nil {
		return time.Time{}, err
	}
	var newest int64
	for _, ct := range cs {
		newest = max(newest, ct.GetCreatedAt())
	}
	if newest == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, newest), nil
}

// Stop stops every running container the kubelet created under name,
// giving each timeout to end; the kubelet starts a new one (a static
// pod's container restarts so, with its files read again).
func (c *Client) Stop(ctx context.Context, name string, timeout time.Duration) error {
	cs, err := c.running(ctx, name)
	if err != nil {
		return err
	}
	for _, ct := range cs {
		if _, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ct.GetId(), Timeout: int64(timeout / time.Second)}); err != nil {
			return fmt.Errorf("stop container %s (%s): %w", name, ct.GetId(), err)
		}
	}
	return nil
}
