package firstboot

import (
	"context"
	"fmt"
	"os"

	"github.com/terrarium-os/terrarium/pkg/node/ops/nodebackup"
)

// Backup writes what the node can back up into dir (created if missing):
// on a control plane the cluster's encrypted backup, and, when its config
// opts in, the node's volumes (pkg/node/ops/nodebackup): `firstboot backup`.
func Backup(ctx context.Context, o Options, dir string) ([]fmt.Stringer, error) {
	r, cfg, err := openEnrolled(o, "there is no cluster to back up")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Host.Path(dir), 0o700); err != nil {
		return nil, err
	}
	return r.backups().WriteAll(ctx, cfg, dir)
}

// backups writes the node's backups, noting each in the journal.
func (r *runner) backups() *nodebackup.Writer {
	return &nodebackup.Writer{Host: r.o.Host, Space: r.o.Space, Release: r.rel.Version,
		Kubernetes: r.flow.KubernetesVersion, Note: r.note}
}
