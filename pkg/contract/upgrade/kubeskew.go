package upgrade

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Refusals of CheckKubernetes. None can be overridden by Force: kubeadm
// cannot take a cluster down a version or across two minors, and a kubelet
// newer than its API servers is outside Kubernetes' skew policy.
var (
	// ErrKubernetesDowngrade means the upgrade carries an older
	// Kubernetes than the node runs.
	ErrKubernetesDowngrade = errors.New("the upgrade's Kubernetes is older than the node's, " +
		"and kubeadm cannot downgrade a cluster; use an upgrade with this Kubernetes or a newer one")
	// ErrKubernetesSkipsMinor means the upgrade's Kubernetes is more than
	// one minor version ahead of the node's (or of another major).
	ErrKubernetesSkipsMinor = errors.New("a Kubernetes upgrade goes one minor version at a time; " +
		"install an upgrade with the next minor version first")
	// ErrAPIServersBehind means an API server of the cluster runs an
	// older Kubernetes than the upgrade would give this node: a worker's
	// kubelet is never newer than the API servers, and the API servers of
	// a cluster are at most one minor apart.
	ErrAPIServersBehind = errors.New("the cluster's API servers are behind: " +
		"upgrade the control planes first (kubelets are never newer than the API servers)")
)

// KubernetesSkew is what CheckKubernetes compares an upgrade's Kubernetes
// with: the node's own and, on a cluster node, its API servers'.
type KubernetesSkew struct {
	// Running is the Kubernetes of the node's slot (its bundle's
	// kube-apiserver tag); empty on an image without Kubernetes.
	Running string
	// ControlPlane is set on a control-plane node.
	ControlPlane bool
	// APIServers are the versions the cluster's API servers run (their
	// static pods' image tags), this node's included; empty before the
	// node is in a cluster, or when they could not be read.
	APIServers []string
}

// CheckKubernetes refuses an upgrade whose Kubernetes (target, the
// manifest's KubernetesVersion) the node cannot move to: an older one
// (ErrKubernetesDowngrade), one more than a minor ahead
// (ErrKubernetesSkipsMinor), or, on a worker, one of a newer minor than
// an API server's, and on a control plane one more than a minor ahead of
// an API server's (ErrAPIServersBehind). The same Kubernetes, or none on either
// side, passes: the OS alone changes.
func CheckKubernetes(s KubernetesSkew, target string) error {
	if target == "" || s.Running == "" || target == s.Running {
		return nil
	}
	t, err := parseVersion(target)
	if err != nil {
		return fmt.Errorf("the upgrade's Kubernetes version: %w", err)
	}
	r, err := parseVersion(s.Running)
	if err != nil {
		return fmt.Errorf("the node's Kubernetes version: %w", err)
	}
	switch {
	case t.compare(r) < 0:
		return fmt.Errorf("the upgrade carries Kubernetes %s and this node runs %s: %w", target, s.Running, ErrKubernetesDowngrade)
	case t.core[0] != r.core[0] || t.core[1] > r.core[1]+1:
		return fmt.Errorf("the upgrade carries Kubernetes %s and this node runs %s: %w", target, s.Running, ErrKubernetesSkipsMinor)
	}
	var behind []string
	for _, a := range s.APIServers {
		v, err := parseVersion(a)
		if err != nil {
			return fmt.Errorf("an API server's Kubernetes version: %w", err)
		}
		// The policy speaks of minor versions: a kubelet a patch ahead
		// of its API servers is within it.
		older := v.core[0] != t.core[0] || v.core[1] < t.core[1]
		if s.ControlPlane {
			older = v.core[0] != t.core[0] || v.core[1]+1 < t.core[1]
		}
		if older && !slices.Contains(behind, a) {
			behind = append(behind, a)
		}
	}
	if len(behind) > 0 {
		role := "worker"
		if s.ControlPlane {
			role = "control plane"
		}
		return fmt.Errorf("the upgrade carries Kubernetes %s, this node is a %s, and API servers run %s: %w",
			target, role, strings.Join(behind, ", "), ErrAPIServersBehind)
	}
	return nil
}

// IsPatchUpgrade reports whether target is a later patch release of
// running's minor release (v1.36.2 to v1.36.3), neither a pre-release:
// the upgrade within which kubeadm renders the control plane's static
// pods alike but for their images' tags.
func IsPatchUpgrade(running, target string) bool {
	r, err := parseVersion(running)
	if err != nil {
		return false
	}
	t, err := parseVersion(target)
	if err != nil {
		return false
	}
	return len(r.pre) == 0 && len(t.pre) == 0 && r.core[0] == t.core[0] && r.core[1] == t.core[1] && t.core[2] > r.core[2]
}
