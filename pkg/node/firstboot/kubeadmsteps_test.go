package firstboot

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/node/images/cri"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
)

// Every control plane asks the container runtime right before its
// preflight: a joining one before kubeadm's (whose own CRI checks it lets
// pass as warnings), the init node before its own (no kubeadm preflight,
// and no kubeadm command in between).
func TestRuntimeCheckedBeforePreflight(t *testing.T) {
	for _, node := range []string{"cp-1", "cp-2"} {
		t.Run(node, func(t *testing.T) {
			e, _ := clusterEnv(t, "")
			e.nodes = []string{"cp-1", "cp-2", "w-1"}
			if err := e.run(clusterConfigWith(t, node, 2)); err != nil {
				t.Fatalf("Run: %v\n%s", err, e.console.String())
			}
			cmds := e.commands()
			check := slices.Index(cmds, "cri-check "+kubeadmconfig.CRISocket)
			preflight := slices.IndexFunc(cmds, func(c string) bool { return strings.Contains(c, " phase preflight ") })
			if node == "cp-1" {
				if preflight >= 0 {
					t.Fatalf("the init node ran kubeadm's preflight: %s", cmds[preflight])
				}
				con := e.console.String()
				if i, j := strings.Index(con, "container runtime: done"), strings.Index(con, "node preflight: started"); i < 0 || j < i {
					t.Fatalf("node preflight not after the runtime check:\n%s", con)
				}
				// Its own preflight comes before any kubeadm phase.
				preflight = slices.IndexFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "kubeadm init ") })
			}
			if check < 0 || preflight < 0 || check > preflight {
				t.Fatalf("CRI check at %d, preflight at %d, want the check first:\n%s", check, preflight, strings.Join(cmds, "\n"))
			}
			for _, c := range cmds[check+1 : preflight] {
				if strings.HasPrefix(c, "kubeadm ") {
					t.Errorf("%q ran between the CRI check and the preflight", c)
				}
			}
		})
	}
}

// A runtime still starting is asked again until it answers; the
// preflight runs once, after it does.
func TestRuntimeWaitedFor(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	asked := 0
	e.runtime = func(ctx context.Context, endpoint string) (cri.Info, error) {
		if asked++; asked < 4 {
			return cri.Info{}, errors.New("dial unix /run/containerd/containerd.sock: connect: no such file or directory")
		}
		return cri.Info{RuntimeName: "containerd"}, nil
	}
	if err := e.run(clusterConfig(t, "w-1")); err != nil {
		t.Fatalf("Run: %v\n%s", err, e.console.String())
	}
	if asked != 4 {
		t.Errorf("runtime asked %d times, want 4", asked)
	}
	if got := strings.Join(kubeadm(), ","); got != "" {
		t.Errorf("worker ran kubeadm: %s", got)
	}
	if strings.Contains(e.console.String(), "retry") {
		t.Errorf("waiting for the runtime retried a step:\n%s", e.console.String())
	}
}

// A runtime that never answers fails the node with a message naming
// containerd and the reason, before kubeadm has done anything.
func TestRuntimeNeverReady(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	e.retryAttempts(1)
	e.runtime = func(ctx context.Context, endpoint string) (cri.Info, error) {
		return cri.Info{}, errors.New("containerd at " + endpoint + " is not ready: NotStarted")
	}
	if err := e.run(clusterConfig(t, "cp-1")); err == nil {
		t.Fatal("Run succeeded with no container runtime")
	}
	if got := kubeadm(); len(got) != 0 {
		t.Errorf("kubeadm ran %v without a container runtime", got)
	}
	st := e.status()
	for _, want := range []string{"container runtime", "containerd.service", "is not ready: NotStarted"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("status message %q lacks %q", st.Message, want)
		}
	}
	if st.State != "failed" {
		t.Errorf("state %q, want failed", st.State)
	}
}
