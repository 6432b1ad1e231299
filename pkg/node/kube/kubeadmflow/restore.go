package kubeadmflow

import (
	"context"
	"fmt"
	"os"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// stepRestore is the init node's step that restores etcd from a backup.
const stepRestore = "restore etcd from a backup"

// restoreEtcd restores the cluster's etcd from the backup the flow's
// Backups offers (a TERRA-BACKUP stick), before kubeadm writes etcd's
// static pod: kubeadm then starts etcd on the restored data, and its
// later phases update what the snapshot holds (they create or update).
// Without a backup the cluster is new and the step does nothing.
//
// It never restores over an etcd of this formation: once kubeadm's etcd
// phase has written its manifest, the step is done whatever a stick says.
// Before that, no etcd has run on this formation (kubeadm's preflight
// found the data directory empty), so a data directory there is an
// interrupted restore's and is replaced.
func restoreEtcd(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if _, err := os.Stat(h.Path(layout.EtcdManifest)); err == nil {
		h.Report.Report(stepRestore, step.Skipped, "this formation's etcd exists already")
		return nil
	}
	found, err := h.Backups(ctx, func(file string) error {
		h.Report.Report(stepRestore, step.Restoring, "from "+file)
		m, err := etcdbackup.Restore(ctx, h.Host, c, file)
		if err != nil {
			return err
		}
		h.Report.Report(stepRestore, step.Restored, fmt.Sprintf("cluster %s from the snapshot %s took at %s into %s",
			m.Cluster, m.Node, m.TakenAt.Format("2006-01-02 15:04:05Z07:00"), layout.EtcdDataDir))
		return nil
	})
	if err != nil {
		return err
	}
	if !found {
		h.Report.Report(stepRestore, step.Skipped, "no "+layout.LabelBackup+" stick: a new cluster")
	}
	return nil
}
