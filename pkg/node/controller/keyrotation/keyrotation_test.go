package keyrotation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/secretskeys"
)

// rotator counts its passes and answers settled or err.
type rotator struct {
	passes  []string
	settled bool
	err     error
}

func (r *rotator) Pass(_ context.Context, node string, _ *machineconfig.Cluster) (secretskeys.Result, error) {
	r.passes = append(r.passes, node)
	return secretskeys.Result{Settled: r.settled}, r.err
}

type env struct {
	c       *Controller
	rot     *rotator
	made    int
	now     time.Time
	cfg     *machineconfig.Config
	changes sync.Mutex
}

func newEnv(t *testing.T, role string, formed bool) *env {
	t.Helper()
	e := &env{rot: &rotator{}, now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC),
		cfg: &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Role: role, SecretsEncryptionKey: "k"}}}
	h := &host.Host{Root: t.TempDir(), Clock: host.ClockFunc(func() time.Time { return e.now })}
	if formed {
		require.NoError(t, os.MkdirAll(h.Path("/etc/kubernetes"), 0o700))
		require.NoError(t, os.WriteFile(h.Path("/etc/kubernetes/admin.conf"), []byte("apiVersion: v1\n"), 0o600))
	}
	e.c = &Controller{Host: h, Config: func() *machineconfig.Config { return e.cfg }, Changes: &e.changes,
		AdminKubeconfig: filepath.Join("/etc/kubernetes", "admin.conf"),
		NewRotator:      func(*machineconfig.Config) (Rotator, error) { e.made++; return e.rot, nil }}
	return e
}

// A formed control plane passes at each look until settled; settled, it
// looks again only after SettledEvery, or at once when its config
// changed.
func TestSettledLooksRarely(t *testing.T) {
	e := newEnv(t, machineconfig.RoleInit, true)
	ctx := context.Background()
	require.NoError(t, e.c.Reconcile(ctx))
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, []string{"cp-1", "cp-1"}, e.rot.passes, "not settled: a pass at each look")

	e.rot.settled = true
	require.NoError(t, e.c.Reconcile(ctx))
	e.now = e.now.Add(SettledEvery - time.Second)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Len(t, e.rot.passes, 3, "settled: no pass before SettledEvery")
	e.now = e.now.Add(time.Second)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Len(t, e.rot.passes, 4, "settled: a pass after SettledEvery")

	changed := *e.cfg
	changed.Hostname = "cp-1b"
	e.cfg = &changed
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, "cp-1b", e.rot.passes[len(e.rot.passes)-1], "a changed config: a pass at once, under the node's new name")
	assert.Equal(t, 1, e.made, "one rotator for the node's life")
}

// No pass where there is nothing to rotate, before the control plane
// formed, or beside a change of the node; a failed pass is looked at again.
func TestNoPass(t *testing.T) {
	ctx := context.Background()
	for name, e := range map[string]*env{
		"a worker":   newEnv(t, machineconfig.RoleWorker, true),
		"not formed": newEnv(t, machineconfig.RoleInit, false),
		"no key": func() *env {
			e := newEnv(t, machineconfig.RoleInit, true)
			e.cfg.Cluster.SecretsEncryptionKey = ""
			return e
		}(),
		"beside a change": func() *env { e := newEnv(t, machineconfig.RoleInit, true); e.changes.Lock(); return e }(),
	} {
		require.NoError(t, e.c.Reconcile(ctx), name)
		assert.Empty(t, e.rot.passes, name)
	}

	e := newEnv(t, machineconfig.RoleControlPlane, true)
	e.rot.err = errors.New("the API does not answer")
	require.ErrorIs(t, e.c.Reconcile(ctx), e.rot.err)
	e.rot.err, e.rot.settled = nil, true
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Len(t, e.rot.passes, 2, "a failed pass is not settled")
	assert.True(t, e.changes.TryLock(), "the change lock is let go after each pass")
}
