package firstboot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clusterconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/ops/nodebackup"
)

// withFakeEtcdctl makes the env's etcdctl save a snapshot holding db.
func withFakeEtcdctl(e *env, db string) {
	inner := e.hostExec
	e.hostExec = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "etcdctl" && len(args) > 2 && args[len(args)-3] == "snapshot" && args[len(args)-2] == "save" {
			if _, err := inner(ctx, name, args...); err != nil {
				return nil, err
			}
			return nil, os.WriteFile(args[len(args)-1], []byte(db), 0o600)
		}
		return inner(ctx, name, args...)
	}
}

// A formed control plane takes its scheduled etcd snapshot, and a
// TERRA-BACKUP stick inserted into it receives one encrypted backup per
// insertion, which the cluster's passphrase opens.
func TestBackupStickAndSchedule(t *testing.T) {
	e, _ := clusterEnv(t, "")
	withFakeEtcdctl(e, "the etcd database")
	config := clusterConfig(t, "cp-1")
	require.NoError(t, e.run(config), e.console.String())

	o := e.options(staticSource(config))
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	snapshots := func() []string {
		m, _ := filepath.Glob(e.path(layout.EtcdSnapshotDir + "/etcd-*.db"))
		return m
	}
	require.Eventually(t, func() bool { return len(snapshots()) > 0 }, 10*time.Second, time.Millisecond, "no scheduled snapshot")
	require.Eventually(t, func() bool { s := e.statusIfAny(); return s != nil && s.Backup != "" }, 10*time.Second, time.Millisecond)
	assert.Regexp(t, `^etcd snapshot \S+ \(0 KiB\), every 1h0m0s, 24 kept$`, e.statusIfAny().Backup, "the status says the schedule")

	backups := func() []string {
		m, _ := filepath.Glob(e.path("/stick/" + backup.Prefix + "*" + backup.Suffix))
		return m
	}
	e.mkdir("/stick")
	e.media.insert(layout.LabelBackupFAT, "/dev/sdc1", "/stick")
	require.Eventually(t, func() bool { return len(backups()) == 1 }, 10*time.Second, time.Millisecond, "no backup on the stick")
	time.Sleep(50 * time.Millisecond) // many more looks at the same stick
	assert.Len(t, backups(), 1, "one backup per insertion")
	cancel()
	require.NoError(t, <-done)
	assert.Contains(t, e.console.String(), "of a fresh snapshot to the TERRA-BACKUP stick; it may be removed")

	cfg, err := machineconfig.Parse("cp-1.yaml", []byte(config))
	require.NoError(t, err)
	pass, err := backup.Passphrase([]byte(cfg.Cluster.PKI.CAKey), cfg.Cluster.Name)
	require.NoError(t, err)
	f, err := os.Open(backups()[0])
	require.NoError(t, err)
	defer f.Close()
	out := filepath.Join(t.TempDir(), "opened")
	m, err := backup.Extract(f, pass, out)
	require.NoError(t, err)
	assert.Equal(t, "cp-1", m.Node)
	assert.Equal(t, cfg.Cluster.CACertHash, m.CACertHash)
	assert.Equal(t, "v1.36.3", m.Kubernetes)
	db, err := os.ReadFile(filepath.Join(out, backup.SnapshotName))
	require.NoError(t, err)
	assert.Equal(t, "the etcd database", string(db))
	key, err := os.ReadFile(filepath.Join(out, "pki", "sa.key"))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(cfg.Cluster.PKI.ServiceAccount.Key), strings.TrimSpace(string(key)))
}

// A worker has no etcd: `firstboot backup` says so, and a backup stick
// inserted into it gets nothing.
func TestBackupOnAWorker(t *testing.T) {
	e, _ := clusterEnv(t, "")
	config := clusterConfig(t, "w-1")
	require.NoError(t, e.run(config), e.console.String())
	_, err := Backup(context.Background(), e.options(staticSource(config)), "/backups")
	assert.ErrorContains(t, err, "runs no etcd member")
}

// A control plane whose etcd no longer answers (its quorum lost) still
// gives a backup: of its newest scheduled snapshot, and says so.
func TestBackupOfScheduledSnapshotWhenEtcdIsDown(t *testing.T) {
	e, _ := clusterEnv(t, "")
	config := clusterConfig(t, "cp-1")
	require.NoError(t, e.run(config), e.console.String())
	e.write(layout.EtcdSnapshotDir+"/etcd-20261127T040000Z.db", "the scheduled snapshot")
	inner := e.hostExec
	if inner == nil {
		inner = e.exec
	}
	e.hostExec = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "etcdctl" {
			return []byte("context deadline exceeded"), errors.New("exit status 1")
		}
		return inner(ctx, name, args...)
	}
	written, err := Backup(context.Background(), e.options(staticSource(config)), "/tmp/backups")
	require.NoError(t, err)
	require.Len(t, written, 1, "the cluster's backup; the config carries no volumes")
	res, ok := written[0].(nodebackup.Result)
	require.True(t, ok)
	assert.False(t, res.Fresh)
	assert.Equal(t, time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC), res.Snapshot.TakenAt.UTC())
	assert.Contains(t, res.String(), "the newest scheduled snapshot (2026-11-27T04:00:00Z; etcd gave no fresh one")
	assert.FileExists(t, res.Path)

	e.write(layout.EtcdSnapshotDir+"/.keep", "")
	require.NoError(t, os.Remove(e.path(layout.EtcdSnapshotDir+"/etcd-20261127T040000Z.db")))
	_, err = Backup(context.Background(), e.options(staticSource(config)), "/tmp/backups")
	assert.ErrorContains(t, err, "no snapshot to back up")
}

// A worker whose config opts its volumes into its backups writes them to
// a TERRA-BACKUP stick inserted into it, encrypted to its own passphrase;
// `firstboot backup` writes them too.
func TestVolumeBackupOnAWorker(t *testing.T) {
	e, _ := clusterEnv(t, "")
	config := clusterConfigWith(t, "w-1", 1, func(topo *clusterconfig.Topology) { topo.BackupVolumes = true })
	require.NoError(t, e.run(config), e.console.String())
	e.write(layout.LocalVolumesDir+"/"+layout.LocalVolumesMarker, "marker")
	e.write(layout.LocalVolumesDir+"/pvc-1_default_data-db-0/token", "token-1")

	o := e.options(staticSource(config))
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	onStick := func() []string {
		m, _ := filepath.Glob(e.path("/stick/" + backup.VolumesPrefix + "lab-w-1-*" + backup.Suffix))
		return m
	}
	e.mkdir("/stick")
	e.media.insert(layout.LabelBackupFAT, "/dev/sdc1", "/stick")
	require.Eventually(t, func() bool { return len(onStick()) == 1 }, 10*time.Second, time.Millisecond, "no volume backup on the stick")
	cancel()
	require.NoError(t, <-done)
	assert.Regexp(t, `backup: wrote \S+/terrarium-volumes-lab-w-1-\d{8}T\d{6}Z\.age \(\d+ KiB\) of 1 volumes, 1 files to the TERRA-BACKUP stick; it may be removed`, e.console.String())
	matches, _ := filepath.Glob(e.path("/stick/" + backup.Prefix + "*"))
	assert.Empty(t, matches, "a worker holds no etcd to back up")

	cfg, err := machineconfig.Parse("w-1.yaml", []byte(config))
	require.NoError(t, err)
	f, err := os.Open(onStick()[0])
	require.NoError(t, err)
	defer f.Close()
	out := filepath.Join(t.TempDir(), "opened")
	m, err := backup.ExtractVolumes(f, cfg.Cluster.VolumesBackupPassphrase(), out, false)
	require.NoError(t, err)
	assert.Equal(t, "w-1", m.Node)
	token, err := os.ReadFile(filepath.Join(out, "pvc-1_default_data-db-0", "token"))
	require.NoError(t, err)
	assert.Equal(t, "token-1", string(token))

	written, err := Backup(context.Background(), e.options(staticSource(config)), "/tmp/backups")
	require.NoError(t, err)
	require.Len(t, written, 1)
	assert.Contains(t, written[0].String(), "/tmp/backups/terrarium-volumes-lab-w-1-")
}
