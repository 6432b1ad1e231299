package kubeadmflow

import (
	"context"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/leaselock"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// The Lease control planes take in turn around their etcd join.
const (
	JoinLockNamespace = "kube-system"
	JoinLockName      = "terrarium-etcd-join"
)

// withJoinLock runs fn while this node holds the cluster's join lock, a
// Lease taken with the admin kubeconfig that kubeadm's
// control-plane-prepare phase wrote (pkg/node/kube/leaselock), held under the node's
// name. While another control plane holds it, the console and the status
// say which. A node whose etcd join failed keeps it until its retry
// succeeds (or it stays silent for the Lease's duration).
func withJoinLock(ctx context.Context, h *Flow, c *machineconfig.Config, name string, fn func(ctx context.Context) error) error {
	client, err := h.API(AdminKubeconfig)
	if err != nil {
		return fmt.Errorf("the join lock needs the API: %w", err)
	}
	report := func(event, detail string) {
		switch event {
		case "waiting":
			h.Cluster(func(s *ClusterStatus) { s.Step = name + ": waiting for " + detail })
			h.Report.Report(name, step.Waiting, "another control plane is joining etcd: "+detail)
		case "unreachable":
			h.Cluster(func(s *ClusterStatus) { s.Step = name + ": waiting for the join lock" })
			h.Report.Report(name, step.Waiting, "cannot read the join lock yet (retrying): "+detail)
		case "acquired":
			h.Cluster(func(s *ClusterStatus) { s.Step = name })
			h.Report.Report(name, step.Lock, "took the join lock "+JoinLockNamespace+"/"+JoinLockName)
		case "kept":
			h.Report.Report(name, step.Lock, "kept the join lock after a failure: this node resumes its etcd join before any other starts one")
		case "lost", "renew failed", "release failed":
			h.Report.Report(name, step.Lock, event+": "+detail)
		}
	}
	lock, err := leaselock.New(client, JoinLockNamespace, JoinLockName, c.Hostname,
		leaselock.WithPoll(h.Timing.APIPoll), leaselock.WithClock(h.Now), leaselock.WithReport(report),
		// A failed etcd-join may leave a member added and not yet
		// promoted: etcd takes no other learner until it is, so only
		// this node may go on (kubeadm's etcd-join resumes it).
		leaselock.KeepAfterFailure())
	if err != nil {
		return err
	}
	return lock.Do(ctx, fn)
}
