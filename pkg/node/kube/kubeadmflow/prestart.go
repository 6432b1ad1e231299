package kubeadmflow

import (
	"context"
	"fmt"
	"os"
	"regexp"

	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
)

// A control plane's trial boot of a patch upgrade starts its control
// plane once, on the new Kubernetes. Without this the kubelet would start
// the old release's static pods at boot, the kubernetes-upgrade phase
// would wait for them, and `kubeadm upgrade apply` would then replace
// them one by one, each waited for: minutes of an emulated node's time
// spent starting an API server twice.
//
// Within a minor release kubeadm renders the API server's, the controller
// manager's and the scheduler's manifests alike but for their images'
// tags, so PrestartControlPlane moves those tags to the slot's release
// before the kubelet's first start (kubelet.service's ExecStartPre,
// `firstboot repair-kubelet`). kubeadm stays the judge: the phase still
// runs `kubeadm upgrade apply` or `upgrade node`, which compares each
// manifest it renders with the one in place and restarts a component
// only where they differ. kubeadm renews a component's certificates only
// when it restarts it, so PrestartControlPlane first renews them all, as
// an upgrade of every component would (`kubeadm certs renew all`, from
// the local CA). etcd is left to kubeadm, after its snapshot. A minor
// upgrade, whose flags may change, starts the old control plane and lets
// kubeadm move it.

// controlPlanePods are the static pods whose manifests
// PrestartControlPlane moves to the slot's Kubernetes.
// The API server comes last: a rerun (after a power cut) looks at its
// tag.
var controlPlanePods = []string{"kube-controller-manager", "kube-scheduler", "kube-apiserver"}

// PrestartControlPlane moves a control plane's static pods, before the
// kubelet starts, to the Kubernetes of its slot (the one mounted at root:
// "" the booted slot, layout.InPlaceSlotDir for a Kubernetes run in place,
// where the running kubelet then restarts the three at once) when the
// slot carries a later
// patch release of the one kubeadm configured the node for (as the
// journal records it, and as its API server's manifest names it). First
// it keeps the manifests and the kubelet's configuration for a rollback
// (as the kubernetes-upgrade phase does, which then keeps that first
// copy), opens the image unpack window (the kubelet is about to unpack
// the new images) and renews the control plane's certificates; it
// checks every manifest before it writes any. It returns what it did, "" when it had nothing to do:
// on a worker, an unformed node, a slot of the node's own Kubernetes, a
// minor upgrade or a rollback. It writes nothing else; a rerun (a kubelet
// restart, a power cut) finds the tags moved and does nothing.
func PrestartControlPlane(ctx context.Context, h *host.Host, root string) (string, error) {
	// None on a worker or an unformed node; the kubernetes-upgrade phase
	// says what is wrong with one it cannot read.
	have := manifestKubernetes(h)
	if have == "" {
		return "", nil
	}
	want, err := bundleKubernetesVersion(h, root)
	if err != nil {
		return "", err
	}
	if !upgrade.IsPatchUpgrade(have, want) {
		return "", nil
	}
	j, err := nodestate.On(h).ReadJournal()
	if err != nil {
		return "", err
	}
	if j.Kubernetes != have {
		// The phase names the copy it keeps after the journal's version:
		// a node whose journal says otherwise is left to it.
		return "", nil
	}
	if err := keepBeforeUpgrade(ctx, h, have); err != nil {
		return "", fmt.Errorf("keep the Kubernetes %s files before the upgrade: %w", have, err)
	}
	retagged := make([][]byte, len(controlPlanePods))
	for i, pod := range controlPlanePods {
		if retagged[i], err = retag(h, pod, have, want); err != nil {
			return "", err
		}
	}
	if err := unpackwindow.Open(h); err != nil {
		return "", err
	}
	if err := renewCertificates(ctx, h, want); err != nil {
		return "", err
	}
	for i, pod := range controlPlanePods {
		name := ManifestsDir + "/" + pod + ".yaml"
		fi, err := os.Stat(h.Path(name))
		if err != nil {
			return "", err
		}
		if _, err := h.WriteIfChanged(name, retagged[i], fi.Mode().Perm()); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("the control plane's certificates are renewed and its static pods start on Kubernetes %s, this slot's (kubeadm configured %s; its upgrade follows)", want, have), nil
}

// retag is a static pod's manifest with its image moved from one tag to
// another: the manifest must name exactly one image of that name and tag,
// on an `image:` line, or it is refused as it is.
func retag(h *host.Host, pod, from, to string) ([]byte, error) {
	name := ManifestsDir + "/" + pod + ".yaml"
	b, err := os.ReadFile(h.Path(name))
	if err != nil {
		return nil, fmt.Errorf("read the %s manifest: %w", pod, err)
	}
	image := "registry.k8s.io/" + pod + ":"
	re := regexp.MustCompile(`(?m)^([ \t]*(?:-[ \t]+)?image:[ \t]*["']?)` + regexp.QuoteMeta(image+from) + `(["']?[ \t]*)$`)
	if n := len(re.FindAllIndex(b, -1)); n != 1 {
		return nil, fmt.Errorf("%s names the image %s%s %d times, not once: left as it is for kubeadm to upgrade", name, image, from, n)
	}
	return re.ReplaceAll(b, []byte("${1}"+image+to+"${2}")), nil
}

// CertsRenewConfigFile is what `kubeadm certs renew` reads before a patch
// upgrade's control plane starts: the certificates' directory, their keys'
// algorithm and the release. kubeadm takes each certificate's names and
// addresses from the certificate it renews.
const CertsRenewConfigFile = "/etc/terrarium/kubeadm-certs-renew.yaml"

// renewCertificates renews the control plane's certificates and the
// kubeconfigs of its components with the local CA, as kubeadm's upgrade
// of each component would, before they start.
func renewCertificates(ctx context.Context, h *host.Host, version string) error {
	cfg := "# Written by Terrarium firstboot before a patch upgrade's control plane starts; kubeadm certs renew reads it.\n" +
		"apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n" +
		"kubernetesVersion: \"" + version + "\"\n" +
		"certificatesDir: " + KubernetesPKIDir + "\n" +
		"encryptionAlgorithm: " + kubeadmconfig.EncryptionAlgorithm + "\n"
	if _, err := h.WriteIfChanged(CertsRenewConfigFile, []byte(cfg), ownerOnly); err != nil {
		return err
	}
	if err := h.Run(ctx, "kubeadm", "certs", "renew", "all", "--config="+CertsRenewConfigFile); err != nil {
		return fmt.Errorf("renew the control plane's certificates: %w", err)
	}
	return nil
}
