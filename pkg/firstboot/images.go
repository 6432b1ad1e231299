package firstboot

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/terrarium-os/terrarium/pkg/cri"
	"github.com/terrarium-os/terrarium/pkg/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/machineconfig"
)

// imagePullTimeout bounds one image's pull (hundreds of megabytes
// unpacked under emulation take minutes).
const imagePullTimeout = 15 * time.Minute

// pullsAtOnce is how many images the images step pulls at the same
// time: one pull is mostly a single thread (containerd's unpacking, the
// registry's hashing), and every control plane has two CPUs.
const pullsAtOnce = 2

// roleRepositories are the repositories of the Kubernetes bundle a node
// of the role runs containers from: every node the pod sandbox, kube-proxy
// and the pod network; control planes also the static pods and CoreDNS
// (which may land on any node, but only a control plane is sure to run it
// before the cluster forms).
func roleRepositories(role string) []string {
	node := []string{"registry.k8s.io/pause", "registry.k8s.io/kube-proxy", "docker.io/flannel/flannel"}
	if role == machineconfig.RoleWorker {
		return node
	}
	return append([]string{
		"registry.k8s.io/etcd", "registry.k8s.io/kube-apiserver", "registry.k8s.io/kube-controller-manager",
		"registry.k8s.io/kube-scheduler", "registry.k8s.io/coredns/coredns",
	}, node...)
}

// roleImages are the images of the slot's bundle that a node of the role
// runs, biggest role first as roleRepositories lists them.
func roleImages(h *Host, role string) ([]string, error) {
	names, err := bundleImages(h)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, repo := range roleRepositories(role) {
		for _, n := range names {
			if i := strings.LastIndex(n, ":"); i > 0 && n[:i] == repo {
				refs = append(refs, n)
			}
		}
	}
	return refs, nil
}

// pullImages makes the images the node will run present in containerd,
// two at a time, from the node's registry cache (containerd's mirrors).
// Without it a joiner pulls nothing until the API answers (a control
// plane's preflight then pulls the static pods' images, a worker's kubelet
// the pod network's once it has joined); this step runs before a joiner
// waits for the API, so the pulls overlap the wait. On the init node it
// replaces kubeadm preflight's pulls (which then find every image present)
// and adds the pod network's, which the node would otherwise pull only
// after flannel's manifest is applied.
func pullImages(ctx context.Context, h *Host, c *machineconfig.Config) error {
	refs, err := roleImages(h, c.Cluster.Role)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, pullsAtOnce)
	)
	for _, ref := range refs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			start := h.now()
			pctx, pcancel := context.WithTimeout(ctx, imagePullTimeout)
			pulled, err := h.pullImage(pctx, kubeadmconfig.CRISocket, ref)
			pcancel()
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
				return
			}
			if pulled {
				h.progress(stepImages, "pulled", fmt.Sprintf("%s in %.1f s", ref, h.now().Sub(start).Seconds()))
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("%w (the image comes from this node's registry cache: `firstboot status`, `journalctl -u terrarium-registry`)", first)
	}
	return ctx.Err()
}

func (h *Host) pullImage(ctx context.Context, endpoint, ref string) (bool, error) {
	if h.PullImage != nil {
		return h.PullImage(ctx, endpoint, ref)
	}
	c, err := cri.New(endpoint)
	if err != nil {
		return false, err
	}
	defer c.Close()
	return c.Pull(ctx, ref)
}
