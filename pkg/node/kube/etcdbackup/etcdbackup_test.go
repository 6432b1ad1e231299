package etcdbackup

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// fakeEtcd plays etcdctl (snapshot save writes the member's "database")
// and etcdutl (snapshot restore makes a data directory holding it).
type fakeEtcd struct {
	mu    sync.Mutex
	db    string // what the member's database holds
	down  bool   // etcdctl cannot reach the member
	calls [][]string
}

func (f *fakeEtcd) exec(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, append([]string{name}, args...))
	switch {
	case name == "etcdctl" && len(args) >= 3 && args[len(args)-3] == "snapshot" && args[len(args)-2] == "save":
		if f.down {
			return []byte("context deadline exceeded"), errors.New("exit status 1")
		}
		return nil, os.WriteFile(args[len(args)-1], []byte(f.db), 0o600)
	case name == "etcdutl" && len(args) > 2 && args[0] == "snapshot" && args[1] == "restore":
		snap, err := os.ReadFile(args[2])
		if err != nil {
			return nil, err
		}
		var data string
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
				data = v
			}
		}
		if _, err := os.Stat(data); err == nil {
			return nil, fmt.Errorf("data-dir %q exists", data)
		}
		if err := os.MkdirAll(filepath.Join(data, "member", "snap"), 0o700); err != nil {
			return nil, err
		}
		return nil, os.WriteFile(filepath.Join(data, "member", "snap", "db"), snap, 0o600)
	}
	return nil, fmt.Errorf("%s %v: not faked", name, args)
}

func (f *fakeEtcd) lastCall(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i][0] == name {
			return f.calls[i]
		}
	}
	return nil
}

type testNode struct {
	h    *host.Host
	etcd *fakeEtcd
	now  time.Time
	cfg  *machineconfig.Config
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	n := &testNode{etcd: &fakeEtcd{db: "etcd database v1"}, now: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	n.h = &host.Host{Root: t.TempDir(), Executor: host.ExecFunc(n.etcd.exec), Clock: host.ClockFunc(func() time.Time { return n.now })}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	caKey := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	n.cfg = &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{
		Name: "plant-7", Role: machineconfig.RoleInit, NodeIP: "10.0.0.11",
		CACertHash: "sha256:" + strings.Repeat("cd", 32),
		PKI:        &machineconfig.ClusterPKI{CAKey: caKey},
	}}
	for _, f := range backup.PKIFiles {
		p := n.h.Path(layout.KubernetesPKIDir + "/" + f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte("node's "+f+"\n"), 0o600))
	}
	return n
}

func TestTakeKeepsTheNewest(t *testing.T) {
	n := newTestNode(t)
	dir := n.h.Path(layout.EtcdSnapshotDir)
	var taken []Snapshot
	for i := range 4 {
		n.etcd.db = fmt.Sprintf("database at %d", i)
		s, err := Take(context.Background(), n.h, 3)
		require.NoError(t, err)
		taken = append(taken, s)
		n.now = n.now.Add(time.Hour)
	}
	assert.Equal(t, "etcd-20261126T100000Z.db", filepath.Base(taken[0].Path))
	call := n.etcd.lastCall("etcdctl")
	assert.Contains(t, call, "--endpoints=https://127.0.0.1:2379")
	assert.Contains(t, call, "--cert="+n.h.Path("/etc/kubernetes/pki/apiserver-etcd-client.crt"))

	all, err := List(n.h)
	require.NoError(t, err)
	require.Len(t, all, 3, "the oldest of four is pruned")
	assert.Equal(t, taken[1].Path, all[0].Path)
	assert.Equal(t, taken[3].Path, all[2].Path)
	got, err := os.ReadFile(all[2].Path)
	require.NoError(t, err)
	assert.Equal(t, "database at 3", string(got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 3, "nothing else is left in the directory")

	n.etcd.down = true
	_, err = Take(context.Background(), n.h, 3)
	assert.ErrorContains(t, err, "etcd snapshot")
	after, err := List(n.h)
	require.NoError(t, err)
	assert.Equal(t, all, after, "a failed snapshot changes nothing")
}

// An interrupted Take's incoming file goes; one another process (the
// schedule, `firstboot backup`) is writing right now stays.
func TestTakeClearsOnlyOldIncoming(t *testing.T) {
	n := newTestNode(t)
	dir := n.h.Path(layout.EtcdSnapshotDir)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	torn := filepath.Join(dir, incomingPrefix+"1-etcd-x.db")
	require.NoError(t, os.WriteFile(torn, []byte("torn"), 0o600))
	require.NoError(t, os.Chtimes(torn, n.now.Add(-time.Hour), n.now.Add(-time.Hour)))
	writing := filepath.Join(dir, incomingPrefix+"2-etcd-y.db")
	require.NoError(t, os.WriteFile(writing, []byte("being written"), 0o600))
	require.NoError(t, os.Chtimes(writing, n.now, n.now))

	_, err := Take(context.Background(), n.h, 3)
	require.NoError(t, err)
	assert.NoFileExists(t, torn)
	assert.FileExists(t, writing)
	all, err := List(n.h)
	require.NoError(t, err)
	assert.Len(t, all, 1, "incoming files are never listed")
}

func TestDue(t *testing.T) {
	n := newTestNode(t)
	due, err := Due(n.h, time.Hour)
	require.NoError(t, err)
	assert.True(t, due, "no snapshot yet")
	_, err = Take(context.Background(), n.h, 3)
	require.NoError(t, err)

	for _, tt := range []struct {
		after time.Duration
		due   bool
	}{
		{0, false},
		{59 * time.Minute, false},
		{time.Hour, true},
		{-2 * time.Hour, true}, // the clock was stepped back
	} {
		n2 := *n
		n2.h = &host.Host{Root: n.h.Root, Executor: n.h.Executor, Clock: host.ClockFunc(func() time.Time { return n.now.Add(tt.after) })}
		due, err := Due(n2.h, time.Hour)
		require.NoError(t, err)
		assert.Equal(t, tt.due, due, "%s after the snapshot", tt.after)
	}
}

func TestBackupAndRestore(t *testing.T) {
	src := newTestNode(t)
	s, err := Take(context.Background(), src.h, 3)
	require.NoError(t, err)
	out := t.TempDir()
	file, err := WriteBackup(src.h, src.cfg, Info{Release: "0.1.0", Kubernetes: "v1.36.3"}, s, out)
	require.NoError(t, err)
	assert.Equal(t, "terrarium-backup-plant-7-cp-1-20261126T100000Z.age", filepath.Base(file))

	// A new init node of the same cluster (its config made from the same
	// secrets, so its PKI files are the same), with a stale etcd data
	// directory.
	dst := newTestNode(t)
	dst.cfg.Cluster.PKI = src.cfg.Cluster.PKI
	for _, f := range backup.PKIFiles {
		b, err := os.ReadFile(src.h.Path(layout.KubernetesPKIDir + "/" + f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst.h.Path(layout.KubernetesPKIDir+"/"+f), b, 0o600))
	}
	// etcd runs as etcd on this node.
	require.NoError(t, os.MkdirAll(dst.h.Path("/etc"), 0o755))
	require.NoError(t, os.WriteFile(dst.h.Path("/etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\netcd:x:232:233::/var/lib/etcd:/usr/sbin/nologin\n"), 0o644))
	stale := dst.h.Path(layout.EtcdDataDir + "/member/wal/0.wal")
	require.NoError(t, os.MkdirAll(filepath.Dir(stale), 0o700))
	require.NoError(t, os.WriteFile(stale, []byte("stale"), 0o600))

	m, err := Restore(context.Background(), dst.h, dst.cfg, file)
	require.NoError(t, err)
	assert.Equal(t, "cp-1", m.Node)
	assert.Equal(t, "v1.36.3", m.Kubernetes)
	db, err := os.ReadFile(dst.h.Path(layout.EtcdDataDir + "/member/snap/db"))
	require.NoError(t, err)
	assert.Equal(t, "etcd database v1", string(db))
	assert.NoFileExists(t, stale, "the stale member directory is gone")
	for _, p := range []string{layout.EtcdDataDir, layout.EtcdDataDir + "/member", layout.EtcdDataDir + "/member/snap/db"} {
		fi, err := os.Stat(dst.h.Path(p))
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		assert.Equal(t, []uint32{232, 233}, []uint32{st.Uid, st.Gid}, "%s is etcd's: etcd runs as etcd", p)
	}
	assert.NoDirExists(t, dst.h.Path(restoreWork()), "the work directory is cleaned up")
	call := dst.etcd.lastCall("etcdutl")
	assert.Contains(t, call, "--name=cp-1")
	assert.Contains(t, call, "--initial-cluster=cp-1=https://10.0.0.11:2380")
	assert.Contains(t, call, "--initial-advertise-peer-urls=https://10.0.0.11:2380")
	assert.Contains(t, call, "--mark-compacted")
}

func TestRestoreRefusesAnotherCluster(t *testing.T) {
	src := newTestNode(t)
	s, err := Take(context.Background(), src.h, 3)
	require.NoError(t, err)
	file, err := WriteBackup(src.h, src.cfg, Info{}, s, t.TempDir())
	require.NoError(t, err)

	keep := func(t *testing.T, n *testNode) string {
		p := n.h.Path(layout.EtcdDataDir + "/member/keep")
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		return p
	}
	tests := []struct {
		name string
		edit func(t *testing.T, n *testNode)
		want string
	}{
		{"another CA key", func(t *testing.T, n *testNode) {}, "does not decrypt with this cluster's backup passphrase"},
		{"another service-account key", func(t *testing.T, n *testNode) {
			n.cfg.Cluster.PKI = src.cfg.Cluster.PKI
			for _, f := range backup.PKIFiles {
				b, err := os.ReadFile(src.h.Path(layout.KubernetesPKIDir + "/" + f))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(n.h.Path(layout.KubernetesPKIDir+"/"+f), b, 0o600))
			}
			require.NoError(t, os.WriteFile(n.h.Path(layout.KubernetesPKIDir+"/sa.pub"), []byte("another key"), 0o600))
		}, "pki/sa.pub differs"},
		{"another CA hash", func(t *testing.T, n *testNode) {
			n.cfg.Cluster.PKI = src.cfg.Cluster.PKI
			n.cfg.Cluster.CACertHash = "sha256:" + strings.Repeat("ef", 32)
		}, "whose CA is"},
		{"a worker", func(t *testing.T, n *testNode) { n.cfg.Cluster.PKI = nil }, "only control planes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newTestNode(t)
			tt.edit(t, n)
			kept := keep(t, n)
			_, err := Restore(context.Background(), n.h, n.cfg, file)
			require.ErrorContains(t, err, tt.want)
			assert.FileExists(t, kept, "a refused restore touches no etcd data")
			assert.Nil(t, n.etcd.lastCall("etcdutl"))
		})
	}
}

// fakeMedia is one stick as a directory.
type fakeMedia struct {
	label, dir string
	used       []bool // the writable flag of each Use
}

func (f *fakeMedia) Find(labels ...string) (media.Medium, bool) {
	for _, l := range labels {
		if l == f.label {
			return media.Medium{Device: "/dev/sdz1", Label: l, Insertion: "/dev/sdz1#1"}, true
		}
	}
	return media.Medium{}, false
}

func (f *fakeMedia) Use(ctx context.Context, m media.Medium, writable bool, fn func(dir string) error) error {
	f.used = append(f.used, writable)
	return fn(f.dir)
}

func TestFromStick(t *testing.T) {
	h := &host.Host{Root: t.TempDir()}
	md := &fakeMedia{label: "OTHER", dir: "/media/stick"}
	dir := h.Path(md.dir)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	var got []string
	collect := func(file string) error { got = append(got, file); return nil }

	found, err := FromStick(h, md)(context.Background(), collect)
	require.NoError(t, err)
	assert.False(t, found, "no TERRA-BACKUP stick")

	md.label = layout.LabelBackupFAT
	found, err = FromStick(h, md)(context.Background(), collect)
	assert.True(t, found)
	assert.ErrorContains(t, err, "holds no backup file")

	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	older := backup.FileName("plant-7", "cp-1", at)
	newer := backup.FileName("plant-7", "cp-1", at.Add(time.Hour))
	newest := backup.FileName("plant-7", "cp-1", at.Add(2*time.Hour))
	require.NoError(t, os.WriteFile(filepath.Join(dir, older), []byte("a"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, newer), []byte("b"), 0o600))
	// A link off the medium is never followed, however new its name.
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, newest)))
	found, err = FromStick(h, md)(context.Background(), collect)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, []string{filepath.Join(dir, newer)}, got)
	assert.Equal(t, []bool{false, false}, md.used, "the stick is mounted read-only")
}
