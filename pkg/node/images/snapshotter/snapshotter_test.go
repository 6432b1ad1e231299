package snapshotter

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/proxy"
	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	diffA  = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	diffB  = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	chainA = diffA
	chainB = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

// slotLayers is a slot with two unpacked layers: A holds a and gone, B
// deletes gone (an overlay whiteout) and adds b.
func slotLayers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	a := filepath.Join(dir, "sha256", diffA[7:])
	b := filepath.Join(dir, "sha256", diffB[7:])
	require.NoError(t, os.MkdirAll(a, 0o755))
	require.NoError(t, os.MkdirAll(b, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(a, "a"), []byte("from A"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(a, "gone"), []byte("deleted by B"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(b, "b"), []byte("from B"), 0o644))
	require.NoError(t, unix.Mknod(filepath.Join(b, "gone"), unix.S_IFCHR, 0))
	return dir
}

// newSnapshotter is a snapshotter on a new root with the slot's layers
// under layersDir, closed when the test ends.
func newSnapshotter(t *testing.T, layersDir string) (*Snapshotter, string) {
	t.Helper()
	root := t.TempDir()
	sn, err := New(root, layersDir, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sn.Close() })
	return sn, root
}

func target(chain, diff string) snapshots.Opt {
	return snapshots.WithLabels(map[string]string{labelTarget: chain, labelDiffID: diff})
}

func TestSlotLayersAreSnapshotsAtOnce(t *testing.T) {
	require.Zero(t, os.Geteuid(), "overlayfs mounts need root")
	ctx := context.Background()
	slot := slotLayers(t)
	sn, _ := newSnapshotter(t, slot)

	// containerd's unpacker asks for A then B with their targets: both
	// exist at once, from the slot.
	_, err := sn.Prepare(ctx, "ns/1/extract-a", "", target(chainA, diffA))
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	_, err = sn.Prepare(ctx, "ns/2/extract-b", "ns/1/extract-a", target(chainB, diffB))
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)

	// As containerd's metadata layer then looks for them: committed, by
	// target and parent.
	var found []snapshots.Info
	require.NoError(t, sn.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		found = append(found, i)
		return nil
	}, `labels."containerd.io/snapshot.ref"==`+chainB+`,parent=="ns/1/extract-a"`))
	require.Len(t, found, 1)
	assert.Equal(t, snapshots.KindCommitted, found[0].Kind)
	assert.Equal(t, "ns/2/extract-b", found[0].Name)
	assert.Equal(t, "true", found[0].Labels[LabelFromSlot])
	link, err := os.Readlink(found[0].Labels[labelUpper])
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(slot, "sha256", diffB[7:]), link)

	// A container on B: the slot's files, B's whiteout applied, writes
	// on STATE, the slot untouched.
	mounts, err := sn.Prepare(ctx, "ctr", "ns/2/extract-b")
	require.NoError(t, err)
	mnt := t.TempDir()
	require.NoError(t, mount.All(mounts, mnt))
	defer func() { assert.NoError(t, mount.UnmountAll(mnt, 0)) }()
	got, err := os.ReadFile(filepath.Join(mnt, "a"))
	require.NoError(t, err)
	assert.Equal(t, "from A", string(got))
	assert.FileExists(t, filepath.Join(mnt, "b"))
	assert.NoFileExists(t, filepath.Join(mnt, "gone"), "B's whiteout")
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "new"), []byte("written"), 0o644))
	require.NoError(t, mount.UnmountAll(mnt, 0))
	assert.NoFileExists(t, filepath.Join(slot, "sha256", diffB[7:], "new"))

	// A layer the slot does not hold is prepared as ever, for unpacking.
	other := "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	m, err := sn.Prepare(ctx, "ns/3/extract-d", "ns/2/extract-b", target(other, other))
	require.NoError(t, err)
	assert.NotEmpty(t, m)

	// Removing the snapshots removes the links, never the slot's layers.
	require.NoError(t, sn.Remove(ctx, "ns/3/extract-d"))
	require.NoError(t, sn.Remove(ctx, "ctr"))
	require.NoError(t, sn.Remove(ctx, "ns/2/extract-b"))
	require.NoError(t, sn.Remove(ctx, "ns/1/extract-a"))
	assert.FileExists(t, filepath.Join(slot, "sha256", diffA[7:], "a"))
	assert.FileExists(t, filepath.Join(slot, "sha256", diffB[7:], "b"))
}

// Over the socket, as containerd's proxy client speaks to it: the slot's
// layer comes back as "already exists", which containerd reads as a
// snapshot it need not unpack.
func TestServeAsAProxySnapshotter(t *testing.T) {
	require.Zero(t, os.Geteuid(), "the overlayfs snapshotter needs root")
	ctx, cancel := context.WithCancel(context.Background())
	slot := slotLayers(t)
	sn, err := New(t.TempDir(), slot, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "run", "snapshotter.sock")
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, sn, sock, func() error { close(ready); return nil }) }()
	<-ready

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(conn), "terrarium")
	_, err = client.Prepare(ctx, "ns/1/extract-a", "", target(chainA, diffA))
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	info, err := client.Stat(ctx, "ns/1/extract-a")
	require.NoError(t, err)
	assert.Equal(t, snapshots.KindCommitted, info.Kind)
	assert.Equal(t, chainA, info.Labels[labelTarget])

	cancel()
	require.NoError(t, <-served)
	require.NoError(t, sn.Close())
}

// After an upgrade the new slot holds other layers: a snapshot the old
// slot gave (the old Kubernetes' images, which run until the node's
// Kubernetes is upgraded) is kept by copying its layer from the old slot
// onto STATE; a layer no slot holds is reported.
func TestReconcileKeepsTheOldSlotsLayers(t *testing.T) {
	require.Zero(t, os.Geteuid(), "overlayfs mounts need root")
	ctx := context.Background()
	old := slotLayers(t)
	root := t.TempDir()
	sn, err := New(root, old, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	_, err = sn.Prepare(ctx, "ns/1/a", "", target(chainA, diffA))
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	_, err = sn.Prepare(ctx, "ns/2/b", "ns/1/a", target(chainB, diffB))
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	require.NoError(t, sn.Close())

	// The new slot holds neither layer (its own directory elsewhere); the
	// old slot is reachable as the other slot, for a while.
	moved := filepath.Join(t.TempDir(), "old-slot")
	require.NoError(t, os.Rename(old, moved))
	sn, err = New(root, t.TempDir(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer sn.Close()
	opened := 0
	res, err := sn.Reconcile(ctx, func(context.Context) (string, func(), error) {
		opened++
		return moved, func() {}, nil
	})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{diffA, diffB}, res.Kept)
	assert.ElementsMatch(t, []string{diffA, diffB}, res.Relinked)
	assert.Empty(t, res.Missing)
	assert.Equal(t, 1, opened)
	require.NoError(t, os.RemoveAll(moved)) // the next upgrade overwrites it

	mounts, err := sn.Prepare(ctx, "ctr", "ns/2/b")
	require.NoError(t, err)
	mnt := t.TempDir()
	require.NoError(t, mount.All(mounts, mnt))
	got, err := os.ReadFile(filepath.Join(mnt, "a"))
	assert.NoError(t, mount.UnmountAll(mnt, 0))
	require.NoError(t, err)
	assert.Equal(t, "from A", string(got))
	_, err = os.Stat(filepath.Join(mnt, "gone"))
	assert.True(t, os.IsNotExist(err))

	// Nothing dangles now: the other slot is not opened again.
	res, err = sn.Reconcile(ctx, func(context.Context) (string, func(), error) {
		opened++
		return "", nil, os.ErrNotExist
	})
	require.NoError(t, err)
	assert.Empty(t, res.Kept)
	assert.Empty(t, res.Relinked)
	assert.Equal(t, 1, opened)
	require.NoError(t, sn.Close())

	// A rollback: the booted slot holds A again. A's snapshot links to
	// the slot's again and its kept copy goes; B's stays kept.
	back := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(back, "sha256", diffA[7:]), 0o755))
	sn, err = New(root, back, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	res, err = sn.Reconcile(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{diffA}, res.Relinked)
	assert.Equal(t, []string{diffA}, res.Pruned)
	assert.NoDirExists(t, filepath.Join(root, "kept", "sha256", diffA[7:]))
	assert.DirExists(t, filepath.Join(root, "kept", "sha256", diffB[7:]))

	// A power cut left B's link unmade (an empty directory where the link
	// goes): made again.
	var linkB string
	require.NoError(t, sn.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		if i.Labels[labelDiffID] == diffB {
			linkB = i.Labels[labelUpper]
		}
		return nil
	}))
	require.NoError(t, os.Remove(linkB))
	require.NoError(t, os.Mkdir(linkB, 0o755))
	res, err = sn.Reconcile(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{diffB}, res.Relinked)
	target, err := os.Readlink(linkB)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "kept", "sha256", diffB[7:]), target)
}

func TestReconcileReportsWhatNoSlotHolds(t *testing.T) {
	require.Zero(t, os.Geteuid(), "overlayfs mounts need root")
	ctx := context.Background()
	old := slotLayers(t)
	sn, _ := newSnapshotter(t, old)
	_, err := sn.Prepare(ctx, "ns/1/a", "", target(chainA, diffA))
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	require.NoError(t, os.RemoveAll(old))
	res, err := sn.Reconcile(ctx, func(context.Context) (string, func(), error) { return t.TempDir(), func() {}, nil })
	require.NoError(t, err)
	assert.Equal(t, []string{diffA}, res.Missing)
}

// A node's first boot: the store has never held a snapshot, so there is
// nothing to reconcile, and that is no error (it was logged as one).
func TestReconcileAFreshStore(t *testing.T) {
	sn, _ := newSnapshotter(t, slotLayers(t))
	opened := false
	res, err := sn.Reconcile(context.Background(), func(context.Context) (string, func(), error) {
		opened = true
		return t.TempDir(), func() {}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, Reconciled{}, res)
	assert.False(t, opened, "the other slot is mounted only when a layer is needed from it")
}
