// Package noderole labels a cluster's workers with the worker role
// (node-role.kubernetes.io/worker), as kubeadm labels its control planes
// with theirs. A kubelet cannot label its own Node so: NodeRestriction
// refuses a node-role label from a node's credential, lest a node claim
// a role, and with it the workloads meant for another. A control plane
// labels them as the cluster's admin.
package noderole

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// API is what the labeller asks of the API server (kubeclient.Client).
type API interface {
	Nodes(ctx context.Context) ([]kubeclient.Node, error)
	LabelNode(ctx context.Context, name string, labels map[string]string) error
}

var _ API = (*kubeclient.Client)(nil)

// Labeller labels the cluster's workers.
type Labeller struct {
	API API
	// ControlPlanes are the control planes' addresses (the cluster
	// config's): a Node with one of them is a control plane even before
	// kubeadm's mark-control-plane has labelled it, which a joining
	// control plane's kubelet registers its Node minutes before.
	ControlPlanes []string
	Log           *slog.Logger
}

// Pass labels every worker that lacks the label, once, and returns the
// names of those it labelled. A node that cannot be labelled (deleted
// meanwhile) does not stop the others.
func (l *Labeller) Pass(ctx context.Context) ([]string, error) {
	nodes, err := l.API.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("label workers: %w", err)
	}
	var labelled []string
	var errs []error
	for _, n := range nodes {
		if n.Worker || !IsWorker(n, l.ControlPlanes) {
			continue
		}
		if err := l.API.LabelNode(ctx, n.Name, map[string]string{kubeclient.WorkerLabel: ""}); err != nil {
			errs = append(errs, err)
			continue
		}
		l.Log.Info("labelled a worker", "node", n.Name, "label", kubeclient.WorkerLabel)
		labelled = append(labelled, n.Name)
	}
	if len(errs) > 0 {
		return labelled, fmt.Errorf("label workers: %w", errs[0])
	}
	return labelled, nil
}

// IsWorker reports whether n is a worker: neither labelled a control
// plane nor at one of the control planes' addresses. A Node that reports
// no address yet is not known to be one.
func IsWorker(n kubeclient.Node, controlPlanes []string) bool {
	if n.ControlPlane {
		return false
	}
	known := false
	for _, a := range n.Addresses {
		if a.Type != "InternalIP" && a.Type != "ExternalIP" {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		known = true
		if slices.ContainsFunc(controlPlanes, func(cp string) bool {
			c, err := netip.ParseAddr(cp)
			return err == nil && c == ip
		}) {
			return false
		}
	}
	return known
}
