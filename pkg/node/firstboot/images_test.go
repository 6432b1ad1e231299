package firstboot

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
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
			require.NoError(t, e.run(clusterConfigWith(t, tc.node, 2)), e.console.String())
			got := pulled(e.commands())
			assert.ElementsMatch(t, tc.want, got)
			if tc.want == nil {
				return
			}
			con := e.console.String()
			first, last := strings.Index(con, "pull images: pulled: "), strings.LastIndex(con, "pull images: pulled: ")
			require.GreaterOrEqual(t, first, 0, "the console does not show the pulls:\n%s", con)
			require.Contains(t, con, "pull images: pulled: docker.io/flannel/flannel:v0.28.10 in ")
			a, b := strings.Index(con, tc.after), strings.Index(con, tc.before)
			assert.True(t, a >= 0 && a < first && b >= 0 && b > last, "the pulls are not between %q and %q:\n%s", tc.after, tc.before, con)
		})
	}
}

// Images already present (the slot's, registered at boot) are not
// reported as pulled but counted as present, and the step succeeds.
func TestPresentImagesNotPulled(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	e.pull = func(ctx context.Context, ref string) (bool, error) { return false, nil }
	require.NoError(t, e.run(clusterConfig(t, "cp-1")), e.console.String())
	assert.NotContains(t, e.console.String(), "pulled", "present images reported as pulled")
	assert.Contains(t, e.console.String(), "pull images: present: 8 of 8 images in containerd's store already")
	assert.Len(t, pulled(e.commands()), 8)
	assert.NotEmpty(t, kubeadm())
}

// Never more than PullsAtOnce pulls at once, and that many when there is
// work for them: the first pulls wait until PullsAtOnce run.
func TestPullsAtOnce(t *testing.T) {
	e, _ := clusterEnv(t, "")
	var mu sync.Mutex
	running, most := 0, 0
	full := make(chan struct{})
	var filled sync.Once
	e.pull = func(ctx context.Context, ref string) (bool, error) {
		mu.Lock()
		running++
		most = max(most, running)
		if running == kubeadmflow.PullsAtOnce {
			filled.Do(func() { close(full) })
		}
		mu.Unlock()
		select {
		case <-full:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		running--
		mu.Unlock()
		return true, nil
	}
	require.NoError(t, e.run(clusterConfig(t, "cp-1")), e.console.String())
	assert.Equal(t, kubeadmflow.PullsAtOnce, most, "most pulls at once")
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
	require.Error(t, e.run(clusterConfig(t, "cp-1")), "Run succeeded although an image did not pull")
	assert.Empty(t, kubeadm(), "kubeadm ran")
	msg := e.status().Message
	for _, want := range []string{"pull images", "kube-apiserver:v1.36.3", "terrarium-registry"} {
		assert.Contains(t, msg, want)
	}
	assert.Less(t, len(pulled(e.commands())), 8, "every pull was started after one failed")
}
