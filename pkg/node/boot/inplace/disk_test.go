package inplace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/slotindex"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// dirESP is an ESP that is a directory.
type dirESP string

func (e dirESP) WithESP(_ bool, fn func(dir string) error) error { return fn(string(e)) }

// diskEnv is a node whose root, ESP and staged slot are directories: a
// mount is a copy of the staged slot's tree made at its mount point, a
// bind a hard link (one file, as a bind makes it).
type diskEnv struct {
	root, esp, staged string
	disk              *Disk
	mounts, binds     int
}

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o755))
	}
}

func writeIndex(t *testing.T, root string) {
	t.Helper()
	ix, err := slotindex.Build(context.Background(), root, layout.SlotIndexFile)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = ix.WriteTo(&buf)
	require.NoError(t, err)
	writeTree(t, root, map[string]string{layout.SlotIndexFile: buf.String()})
}

func writeRelease(t *testing.T, root, version string) {
	t.Helper()
	b, err := (&release.Release{Name: "terrarium", Version: version, Suite: "trixie", KernelVersion: "6.12"}).Marshal()
	require.NoError(t, err)
	writeTree(t, root, map[string]string{layout.ReleaseFile: string(b)})
}

func newDiskEnv(t *testing.T, stagedKubelet string) *diskEnv {
	t.Helper()
	dir := t.TempDir()
	e := &diskEnv{root: filepath.Join(dir, "root"), esp: filepath.Join(dir, "esp"), staged: filepath.Join(dir, "staged")}
	base := map[string]string{
		layout.KubeletProgram: "kubelet 1.36.2", layout.KubeadmProgram: "kubeadm 1.36.2", layout.KubectlProgram: "kubectl",
		"/usr/bin/firstboot": "firstboot", layout.BundleDir + "/index.json": "{1.36.2}",
	}
	writeTree(t, e.root, base)
	writeRelease(t, e.root, "0.1.0")
	writeIndex(t, e.root)
	base[layout.KubeletProgram], base[layout.KubeadmProgram] = stagedKubelet, "kubeadm 1.36.3"
	base[layout.BundleDir+"/index.json"] = "{1.36.3}"
	writeTree(t, e.staged, base)
	writeRelease(t, e.staged, "0.2.0")
	writeIndex(t, e.staged)
	writeTree(t, e.esp, map[string]string{layout.SlotA.KernelPath(): "vmlinuz", layout.SlotA.InitrdPath(): "initrd"})
	e.disk = &Disk{
		Path: func(p string) string { return filepath.Join(e.root, p) }, ESP: dirESP(e.esp),
		ByPartLabel: "/dev/disk/by-partlabel", MountDir: layout.InPlaceSlotDir, Marker: layout.RunInPlaceSlot,
		Mount: func(_ context.Context, byPartLabel string, slot layout.Slot, mnt string) (func(), error) {
			if slot != layout.SlotB || mnt != filepath.Join(e.root, layout.InPlaceSlotDir) {
				return nil, errors.New("mounted the wrong slot, or at the wrong place")
			}
			e.mounts++
			if _, err := os.Stat(mnt); err == nil {
				return func() {}, nil // mounted already (a real Switch sees the mount point)
			}
			require.NoError(t, os.CopyFS(mnt, os.DirFS(e.staged)))
			return func() { require.NoError(t, os.RemoveAll(mnt)) }, nil
		},
		Mounted: func(dir string) (bool, error) { _, err := os.Stat(dir); return err == nil, nil },
		Bind: func(src, dst string) error {
			e.binds++
			if err := os.Remove(dst); err != nil {
				return err
			}
			return os.Link(src, dst)
		},
	}
	require.NoError(t, os.MkdirAll(filepath.Join(e.root, "run/terrarium"), 0o755))
	return e
}

func manifest(kernel string) upgrade.Manifest {
	return upgrade.Manifest{Version: "0.2.0", Parts: []upgrade.PartInfo{
		{Name: "rootfs.squashfs", Role: upgrade.RoleRootfs, SHA256: hexSum([]byte("rootfs"))},
		{Name: "vmlinuz", Role: upgrade.RoleKernel, SHA256: hexSum([]byte(kernel))},
		{Name: "initrd.img", Role: upgrade.RoleInitramfs, SHA256: hexSum([]byte("initrd"))},
	}}
}

func TestDiskDecideAndSwitch(t *testing.T) {
	e := newDiskEnv(t, "kubelet 1.36.3")
	ctx := context.Background()
	rel := release.Release{Name: "terrarium", Version: "0.1.0", Suite: "trixie", KernelVersion: "6.12"}
	d, err := e.disk.Decide(ctx, layout.SlotA, rel, layout.SlotB, manifest("vmlinuz"))
	require.NoError(t, err)
	require.True(t, d.InPlace, d.Reason)
	assert.Equal(t, []string{layout.KubeletProgram, layout.KubeadmProgram}, d.Programs)
	assert.True(t, d.Bundle)
	assert.NoDirExists(t, filepath.Join(e.root, layout.InPlaceSlotDir), "unmounted after the look")

	require.NoError(t, e.disk.Switch(ctx, layout.SlotB))
	assert.Equal(t, 3, e.binds, "every program, kubectl's same bytes too")
	b, err := os.ReadFile(filepath.Join(e.root, layout.KubeletProgram))
	require.NoError(t, err)
	assert.Equal(t, "kubelet 1.36.3", string(b))
	b, err = os.ReadFile(filepath.Join(e.root, layout.RunInPlaceSlot))
	require.NoError(t, err)
	assert.Equal(t, "b\n", string(b))
	assert.Equal(t, layout.SlotB, e.disk.Active())

	// Again (firstboot restarted): nothing bound twice.
	require.NoError(t, e.disk.Switch(ctx, layout.SlotB))
	assert.Equal(t, 3, e.binds)
	_, err = e.disk.Decide(ctx, layout.SlotA, rel, layout.SlotB, manifest("vmlinuz"))
	require.ErrorContains(t, err, "runs slot b's Kubernetes in place already")
	require.ErrorContains(t, e.disk.Switch(ctx, layout.SlotA), "in place already")
}

func TestDiskDecideReboots(t *testing.T) {
	ctx := context.Background()
	rel := release.Release{Name: "terrarium", Version: "0.1.0", Suite: "trixie", KernelVersion: "6.12"}
	t.Run("another kernel", func(t *testing.T) {
		e := newDiskEnv(t, "kubelet 1.36.3")
		d, err := e.disk.Decide(ctx, layout.SlotA, rel, layout.SlotB, manifest("vmlinuz 6.13"))
		require.NoError(t, err)
		assert.False(t, d.InPlace)
		assert.Contains(t, d.Reason, "what boots the slot")
		assert.Zero(t, e.mounts, "decided before mounting")
	})
	t.Run("firstboot changes", func(t *testing.T) {
		e := newDiskEnv(t, "kubelet 1.36.3")
		writeTree(t, e.staged, map[string]string{"/usr/bin/firstboot": "firstboot 2"})
		writeIndex(t, e.staged)
		d, err := e.disk.Decide(ctx, layout.SlotA, rel, layout.SlotB, manifest("vmlinuz"))
		require.NoError(t, err)
		assert.False(t, d.InPlace)
		assert.Equal(t, "/usr/bin/firstboot changes", d.Reason)
	})
	t.Run("a running slot without an index", func(t *testing.T) {
		e := newDiskEnv(t, "kubelet 1.36.3")
		require.NoError(t, os.Remove(filepath.Join(e.root, layout.SlotIndexFile)))
		d, err := e.disk.Decide(ctx, layout.SlotA, rel, layout.SlotB, manifest("vmlinuz"))
		require.NoError(t, err)
		assert.False(t, d.InPlace)
		assert.Contains(t, d.Reason, "no index")
	})
	t.Run("a staged slot without an index", func(t *testing.T) {
		e := newDiskEnv(t, "kubelet 1.36.3")
		require.NoError(t, os.Remove(filepath.Join(e.staged, layout.SlotIndexFile)))
		d, err := e.disk.Decide(ctx, layout.SlotA, rel, layout.SlotB, manifest("vmlinuz"))
		require.NoError(t, err)
		assert.False(t, d.InPlace)
		assert.Contains(t, d.Reason, "no index")
	})
}

func TestWaitServed(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead || r.URL.Path != "/v2/kube-apiserver/manifests/v1.36.3" || r.URL.Query().Get("ns") != "registry.k8s.io" {
			http.Error(w, "asked "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
			return
		}
		if asked.Add(1) < 3 { // the registry has not looked at the marker yet
			http.NotFound(w, r)
			return
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	require.NoError(t, WaitServed(context.Background(), addr, "registry.k8s.io/kube-apiserver:v1.36.3", time.Millisecond))
	assert.Equal(t, int32(3), asked.Load())

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := WaitServed(ctx, addr, "registry.k8s.io/kube-apiserver:v9.9.9", time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "does not serve registry.k8s.io/kube-apiserver:v9.9.9 yet")
	require.ErrorContains(t, WaitServed(ctx, addr, "kube-apiserver", time.Millisecond), "not a host/repository:tag reference")
}

func TestServiceSwitch(t *testing.T) {
	ctx := context.Background()
	e := newDiskEnv(t, "kubelet 1.36.3")
	var started []string
	s := &Service{Disk: e.disk, Start: func(ctx context.Context, unit string) error {
		started = append(started, unit)
		return e.disk.Switch(ctx, layout.SlotB) // what the unit's firstboot in-place b does
	}}
	require.NoError(t, s.Switch(ctx, layout.SlotB))
	assert.Equal(t, []string{"terrarium-in-place@b.service"}, started)

	idle := &Service{Disk: newDiskEnv(t, "kubelet 1.36.3").disk, Start: func(context.Context, string) error { return nil }}
	require.ErrorContains(t, idle.Switch(ctx, layout.SlotB), "terrarium-in-place@b.service ran, but slot b is not mounted")
	failing := &Service{Disk: e.disk, Start: func(context.Context, string) error { return errors.New("exit status 1") }}
	require.ErrorContains(t, failing.Switch(ctx, layout.SlotB), "start terrarium-in-place@b.service: exit status 1")
}

func TestDiskDecideOnAUKINode(t *testing.T) {
	e := newDiskEnv(t, "kubelet 1.36.3")
	require.NoError(t, os.RemoveAll(e.esp))
	writeTree(t, e.esp, map[string]string{layout.SlotA.UKIPath(): "uki"})
	rel := release.Release{Name: "terrarium", Version: "0.1.0", Suite: "trixie", KernelVersion: "6.12"}
	d, err := e.disk.Decide(context.Background(), layout.SlotA, rel, layout.SlotB, manifest("vmlinuz"))
	require.NoError(t, err)
	assert.False(t, d.InPlace)
	assert.Contains(t, d.Reason, "boots a signed UKI")
	assert.Zero(t, e.mounts)
}
