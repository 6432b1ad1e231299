package kubeadmflow

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// imagePullTimeout bounds one image's pull (hundreds of megabytes
// unpacked under emulation take minutes).
const imagePullTimeout = 15 * time.Minute

// PullsAtOnce is how many images the images step pulls at the same
// time, when it has any to pull: the slot's images are normally in
// containerd's store from the boot on (pkg/node/images/imageseed). A bundled
// image's pull unpacks nothing (its layers are the
// slot's, linked by the node's snapshotter), but its manifest and config
// reads and containerd's metadata writes still cost CPU under TCG, and
// four at a time take each twice as long as two, for no gain on a
// control plane's two CPUs (make bench-cluster, docs/benchmarks.md).
const PullsAtOnce = 2

// controlPlaneRepositories are the repositories of the Kubernetes bundle
// a control plane runs containers from: etcd, the static pods and CoreDNS,
// then the pod sandbox, kube-proxy and the pod network that every node
// runs.
func controlPlaneRepositories() []string {
	return []string{
		"registry.k8s.io/etcd", "registry.k8s.io/kube-apiserver", "registry.k8s.io/kube-controller-manager",
		"registry.k8s.io/kube-scheduler", "registry.k8s.io/coredns/coredns",
		"registry.k8s.io/pause", "registry.k8s.io/kube-proxy", "docker.io/flannel/flannel",
	}
}

// controlPlaneImages are the images of the slot's bundle a control plane
// runs, in controlPlaneRepositories' order; an application's images are
// never among them.
func controlPlaneImages(h *Flow) ([]string, error) {
	names, err := bundleImages(h.Host, h.KubernetesRoot())
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, repo := range controlPlaneRepositories() {
		for _, n := range names {
			if i := strings.LastIndex(n, ":"); i > 0 && n[:i] == repo {
				refs = append(refs, n)
			}
		}
	}
	return refs, nil
}

// pullImages makes sure the images a control plane runs are present in
// containerd, right before kubeadm's preflight, which then finds them
// present. The snapshotter's service normally registered them at boot
// (the journal says how many were present); one that is missing is
// pulled, PullsAtOnce at a time, from the node's registry cache
// (containerd's mirrors), with its time journalled. Over kubeadm's own
// images it covers the pod network's.
//
// Workers have no such step (their images are the slot's too), and
// joiners do not pull before the API answers: a worker that pulls (one
// vCPU, sharing the host with the init node forming the cluster) takes
// many times as long as the init node for the same images, and its join
// waits behind them (docs/benchmarks.md).
func pullImages(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	refs, err := controlPlaneImages(h)
	if err != nil {
		return err
	}
	var pulled atomic.Int32
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(PullsAtOnce)
	for _, ref := range refs {
		if ctx.Err() != nil {
			break // a pull failed: start no more
		}
		g.Go(func() error {
			start := h.Now()
			pctx, cancel := context.WithTimeout(ctx, imagePullTimeout)
			defer cancel()
			did, err := h.Runtime.Pull(pctx, kubeadmconfig.CRISocket, ref)
			if err == nil && did {
				pulled.Add(1)
				h.Report.Report(stepImages, step.Pulled, fmt.Sprintf("%s in %.1f s", ref, h.Now().Sub(start).Seconds()))
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("%w (the image comes from this node's registry cache: `firstboot status`, `journalctl -u terrarium-registry`)", err)
	}
	if present := len(refs) - int(pulled.Load()); present > 0 {
		h.Report.Report(stepImages, step.Present, fmt.Sprintf("%d of %d images in containerd's store already (the slot's, registered at boot)", present, len(refs)))
	}
	return nil
}
