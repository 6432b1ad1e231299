package snapshots

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/controller/controllertest"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// etcd is the test's etcdctl: it saves a snapshot, or fails with down.
type etcd struct {
	mu    sync.Mutex
	down  error
	saves int
}

func (e *etcd) exec(_ context.Context, name string, args ...string) ([]byte, error) {
	if name != "etcdctl" || len(args) < 3 || args[len(args)-3] != "snapshot" {
		return nil, errors.New(name + ": not on this test host")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.saves++
	if e.down != nil {
		return nil, e.down
	}
	return nil, os.WriteFile(args[len(args)-1], []byte("etcd db"), 0o600)
}

type env struct {
	c     *Controller
	etcd  *etcd
	now   time.Time
	r     *controllertest.Reporter
	cfg   *machineconfig.Config
	state string
}

func newEnv(t *testing.T, role string) *env {
	t.Helper()
	e := &env{etcd: &etcd{}, now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), r: &controllertest.Reporter{},
		cfg: &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Role: role}}}
	h := &host.Host{Root: t.TempDir(), Executor: host.ExecFunc(e.etcd.exec), Clock: host.ClockFunc(func() time.Time { return e.now })}
	require.NoError(t, os.MkdirAll(filepath.Dir(h.Path(layout.EtcdManifest)), 0o755))
	require.NoError(t, os.WriteFile(h.Path(layout.EtcdManifest), []byte("kind: Pod\n"), 0o600))
	e.state = filepath.Join(t.TempDir(), "status.json")
	pub := status.NewPublisher(e.state, io.Discard, slog.New(slog.DiscardHandler), status.Status{})
	e.c = &Controller{Host: h, Config: func() *machineconfig.Config { return e.cfg }, Status: pub, Report: e.r}
	return e
}

// A due snapshot is taken and shown; the next is not due until the
// schedule's interval has passed.
func TestSnapshotWhenDue(t *testing.T) {
	e := newEnv(t, machineconfig.RoleInit)
	ctx := context.Background()
	require.NoError(t, e.c.Reconcile(ctx))
	require.Equal(t, 1, e.etcd.saves, "none taken yet: due")
	require.Len(t, e.r.Steps(), 1)
	assert.Regexp(t, `^etcd snapshot=taken: \S+ \(0 KiB\); the newest \d+ kept$`, e.r.Steps()[0])
	assert.Contains(t, e.c.Status.Get().Backup, "etcd snapshot 2026-12-03T10:00:00Z")

	interval, _ := e.cfg.Cluster.BackupSchedule()
	e.now = e.now.Add(interval - time.Minute)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, 1, e.etcd.saves, "not due yet")
	e.now = e.now.Add(time.Minute)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, 2, e.etcd.saves, "due again after the interval")
}

// A failed snapshot is said, noted and shown, and not tried again before
// Retry has passed; then it is.
func TestFailedSnapshotRetriedAfterRetry(t *testing.T) {
	e := newEnv(t, machineconfig.RoleInit)
	e.etcd.down = errors.New("context deadline exceeded")
	ctx := context.Background()
	require.NoError(t, e.c.Reconcile(ctx))
	require.Equal(t, 1, e.etcd.saves)
	assert.Contains(t, e.r.Console(), "backup: the scheduled etcd snapshot failed (next try in 5m0s)")
	assert.Regexp(t, `^the last snapshot failed: etcd snapshot: etcdctl .*: context deadline exceeded`, e.c.Status.Get().Backup)
	require.FileExists(t, e.state, "published")

	e.now = e.now.Add(Retry - time.Second)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, 1, e.etcd.saves, "not hammered")
	e.etcd.down = nil
	e.now = e.now.Add(time.Second)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, 2, e.etcd.saves, "tried again after Retry")
	assert.Contains(t, e.c.Status.Get().Backup, "etcd snapshot 2026-12-03T10:05:00Z")
}

// A worker runs no etcd: nothing is taken.
func TestWorkerTakesNone(t *testing.T) {
	e := newEnv(t, machineconfig.RoleWorker)
	require.NoError(t, e.c.Reconcile(context.Background()))
	assert.Zero(t, e.etcd.saves)
	assert.Empty(t, e.r.Steps())
}
