package backupstick

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/controller/controllertest"
	"github.com/terrarium-os/terrarium/pkg/node/ops/nodebackup"
)

func newController(t *testing.T, role string, etcdMember bool) (*Controller, *controllertest.Media, *controllertest.Reporter) {
	t.Helper()
	h := controllertest.Host(t)
	if etcdMember {
		require.NoError(t, os.MkdirAll(filepath.Dir(h.Path(layout.EtcdManifest)), 0o755))
		require.NoError(t, os.WriteFile(h.Path(layout.EtcdManifest), []byte("kind: Pod\n"), 0o600))
	}
	cfg := &machineconfig.Config{Hostname: "n-1", Cluster: &machineconfig.Cluster{Role: role}}
	m := &controllertest.Media{Host: h, Dir: "/stick"}
	r := &controllertest.Reporter{}
	c := &Controller{Media: m, Backup: &nodebackup.Writer{Host: h, Release: "0.2.0", Note: r.Note},
		Config: func() *machineconfig.Config { return cfg }, Report: r}
	return c, m, r
}

// A worker whose backups carry no volumes has nothing to write: the
// console says where the stick goes, and the stick is not mounted.
func TestNothingToBackUp(t *testing.T) {
	c, m, r := newController(t, machineconfig.RoleWorker, false)
	m.Insert(layout.LabelBackupFAT, "/dev/sdb1")
	require.NoError(t, c.Reconcile(context.Background()))
	assert.Zero(t, m.Uses)
	assert.Contains(t, r.Console(), "backup: a TERRA-BACKUP stick (/dev/sdb1) on a node without etcd whose backups carry no volumes: insert it into a control plane")
	assert.Empty(t, r.Steps())
}

// A control plane's backup that fails (no etcd answering and no
// scheduled snapshot) is said and noted once per insertion; the stick
// left in is not tried again, a new insertion is.
func TestBackupFailsOncePerInsertion(t *testing.T) {
	c, m, r := newController(t, machineconfig.RoleInit, true)
	m.Insert(layout.LabelBackup, "/dev/sdc1")
	ctx := context.Background()
	require.NoError(t, c.Reconcile(ctx))
	require.NoError(t, c.Reconcile(ctx))
	assert.Equal(t, 1, m.Uses)
	require.Len(t, r.Steps(), 1)
	assert.Regexp(t, `^backup=failed: no snapshot to back up: etcd snapshot: `, r.Steps()[0])
	assert.Contains(t, r.Console(), "backup: nothing more written to /dev/sdc1: no snapshot to back up")

	m.Pull()
	m.Insert(layout.LabelBackup, "/dev/sdc1")
	require.NoError(t, c.Reconcile(ctx))
	assert.Equal(t, 2, m.Uses, "a new insertion is tried")
}
