package firstboot

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kubeadmflow"
)

// pulled are the refs of the "cri-pull" commands, in order.
func pulled(cmds []string) []string {
	var refs []string
	for _, c := range cmds {
		if ref, ok := strings.CutPrefix(c, "cri-pull "); ok {
			refs = append(refs, ref)
		}
	}
	return refs
}

// Control planes pull the bundle images they run, none of an
// application's, right before kubeadm's preflight (a joiner: after the
// wait for the API); workers pull nothing themselves.
func TestControlPlanesPullTheirImages(t *testing.T) {
	controlPlane := []string{
		"registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-controller-manager:v1.36.3",
		"registry.k8s.io/kube-scheduler:v1.36.3", "registry.k8s.io/coredns/coredns:v1.14.2",
		"registry.k8s.io/pause:3.10.2", "registry.k8s.io/kube-proxy:v1.36.3", "docker.io/flannel/flannel:v0.28.10",
	}
	for _, tc := range []struct {
		node          string
		want          []string
		after, before string
	}{
		{"cp-1", controlPlane, "container runtime: done", "node preflight: started"},
		{"cp-2", controlPlane, "wait for the API: done", "join phase preflight: started"},
		{"w-1", nil, "", ""},
	} {
		t.Run(tc.node, func(t *testing.T) {
			e, _ := clusterEnv(t, "")
			e.nodes = []string{"cp-1", "cp-2", "w-1"}
			if err := e.run(clusterConfigWith(t, tc.node, 2)); err != nil {
				t.Fatalf("Run: %v\n%s", err, e.console.String())
			}
			got := pulled(e.commands())
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("pulled %v, want %v", got, want)
			}
			if tc.want == nil {
				return
			}
			con := e.console.String()
			first, last := strings.Index(con, "pull images: pulled: "), strings.LastIndex(con, "pull images: pulled: ")
			if first < 0 || !strings.Contains(con, "pull images: pulled: docker.io/flannel/flannel:v0.28.10 in ") {
				t.Fatalf("the console does not show the pulls:\n%s", con)
			}
			if a, b := strings.Index(con, tc.after), strings.Index(con, tc.before); a < 0 || a > first || b < 0 || b < last {
				t.Errorf("the pulls are not between %q and %q:\n%s", tc.after, tc.before, con)
			}
		})
	}
}

// Images already present are not reported as pulled, and the step
// succeeds.
func TestPresentImagesNotPulled(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	e.pull = func(ctx context.Context, ref string) (bool, error) { return false, nil }
	if err := e.run(clusterConfig(t, "cp-1")); err != nil {
		t.Fatalf("Run: %v\n%s", err, e.console.String())
	}
	if strings.Contains(e.console.String(), "pulled") {
		t.Errorf("present images reported as pulled:\n%s", e.console.String())
	}
	if len(pulled(e.commands())) != 8 || len(kubeadm()) == 0 {
		t.Errorf("asked for %v; kubeadm ran %v", pulled(e.commands()), kubeadm())
	}
}

// Never more than two pulls at once, and two when there is work for two.
func TestPullsTwoAtATime(t *testing.T) {
	e, _ := clusterEnv(t, "")
	var mu sync.Mutex
	running, most := 0, 0
	e.pull = func(ctx context.Context, ref string) (bool, error) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return true, nil
	}
	if err := e.run(clusterConfig(t, "cp-1")); err != nil {
		t.Fatalf("Run: %v\n%s", err, e.console.String())
	}
	if most != kubeadmflow.PullsAtOnce {
		t.Errorf("at most %d pulls ran at once, want %d", most, kubeadmflow.PullsAtOnce)
	}
}

// An image the registry cache cannot give fails the node with the image
// named and a pointer at the registry, before kubeadm has run, and the
// other pulls stop.
func TestPullFailureNamesTheImage(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	e.retryAttempts(1)
	e.pull = func(ctx context.Context, ref string) (bool, error) {
		if ref == "registry.k8s.io/kube-apiserver:v1.36.3" {
			return false, errors.New("pull registry.k8s.io/kube-apiserver:v1.36.3 through the container runtime at unix:///run/containerd/containerd.sock: not found")
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return true, nil
		}
	}
	if err := e.run(clusterConfig(t, "cp-1")); err == nil {
		t.Fatal("Run succeeded although an image did not pull")
	}
	if got := kubeadm(); len(got) != 0 {
		t.Errorf("kubeadm ran %v", got)
	}
	msg := e.status().Message
	for _, want := range []string{"pull images", "kube-apiserver:v1.36.3", "terrarium-registry"} {
		if !strings.Contains(msg, want) {
			t.Errorf("status message %q lacks %q", msg, want)
		}
	}
	if n := len(pulled(e.commands())); n >= 8 {
		t.Errorf("all %d pulls were started after one failed", n)
	}
}
