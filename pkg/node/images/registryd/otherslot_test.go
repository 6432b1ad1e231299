package registryd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// otherSlotEnv is a registry whose slot carries the new Kubernetes and
// whose other slot (a directory standing in for its squashfs: mounting a
// partition needs a real one) the old.
type otherSlotEnv struct {
	addr                      string
	marker, inPlace, mountDir string
	old, newPause             v1.Image
	mounted                   atomic.Value // the slot asked for
	mounts                    atomic.Int32
	unmounted                 atomic.Bool
}

func startWithOtherSlot(t *testing.T, marker string) *otherSlotEnv {
	t.Helper()
	dir := t.TempDir()
	e := &otherSlotEnv{
		addr: freeAddr(t), marker: filepath.Join(dir, "run", "trial-boot"), inPlace: filepath.Join(dir, "run", "in-place-slot"),
		mountDir: filepath.Join(dir, "previous-slot"),
	}
	e.old, e.newPause = randomImage(t), randomImage(t)
	writeLayout(t, filepath.Join(dir, "bundle"), map[string]v1.Image{
		"registry.k8s.io/kube-apiserver:v1.36.3": randomImage(t),
		"registry.k8s.io/pause:3.10":             e.newPause,
	})
	writeLayout(t, filepath.Join(e.mountDir, layout.BundleDir), map[string]v1.Image{
		"registry.k8s.io/kube-apiserver:v1.36.2": e.old,
		"registry.k8s.io/pause:3.10":             randomImage(t), // never served: the slot's own wins
	})
	require.NoError(t, os.MkdirAll(filepath.Dir(e.marker), 0o755))
	if marker != "" {
		require.NoError(t, os.WriteFile(e.marker, []byte(marker), 0o644))
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runUntilCleanup(t, Options{
		BundleDir: filepath.Join(dir, "bundle"), CacheDir: filepath.Join(dir, "cache"), ConfigFile: filepath.Join(dir, "missing.json"),
		Loopback: e.addr, Log: log,
		OtherSlot: &OtherSlot{
			Markers: []string{e.marker, e.inPlace}, ByPartLabel: "/dev/disk/by-partlabel", MountDir: e.mountDir, Interval: 20 * time.Millisecond, Log: log,
			Mount: func(_ context.Context, byPartLabel string, slot layout.Slot, mnt string) (func(), error) {
				if mnt != e.mountDir || byPartLabel != "/dev/disk/by-partlabel" {
					return nil, fmt.Errorf("mounted %s at %s", byPartLabel, mnt)
				}
				e.mounted.Store(slot)
				e.mounts.Add(1)
				e.unmounted.Store(false)
				return func() { e.unmounted.Store(true) }, nil
			},
		},
	})
	return e
}

// manifest asks the registry for repo:tag as containerd does through its
// mirror, and returns the status and digest.
func (e *otherSlotEnv) manifest(t *testing.T, repo, tag string) (int, string) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/v2/%s/manifests/%s?ns=registry.k8s.io", e.addr, repo, tag))
	require.NoError(t, err)
	_ = resp.Body.Close() // only the status and headers count
	return resp.StatusCode, resp.Header.Get("Docker-Content-Digest")
}

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	require.NoError(t, err)
	return d.String()
}

func TestOtherSlotServedDuringAnUpgradeTrial(t *testing.T) {
	e := startWithOtherSlot(t, "a\n")
	require.Eventually(t, func() bool {
		code, _ := e.manifest(t, "kube-apiserver", "v1.36.2")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "the old control plane's image, from the slot the trial falls back to")
	assert.Equal(t, layout.SlotA, e.mounted.Load())
	code, digest := e.manifest(t, "kube-apiserver", "v1.36.2")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, digestOf(t, e.old), digest)
	code, digest = e.manifest(t, "pause", "3.10")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, digestOf(t, e.newPause), digest, "the booted slot's tags are never shadowed")
	code, _ = e.manifest(t, "kube-apiserver", "v1.36.3")
	assert.Equal(t, http.StatusOK, code)

	// Blessed: firstboot removes the marker, the registry lets go.
	require.NoError(t, os.Remove(e.marker))
	require.Eventually(t, e.unmounted.Load, 10*time.Second, 20*time.Millisecond, "the old slot unmounted, so the next upgrade may write it")
	code, _ = e.manifest(t, "kube-apiserver", "v1.36.2")
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = e.manifest(t, "kube-apiserver", "v1.36.3")
	assert.Equal(t, http.StatusOK, code)
}

// TestOtherSlotServedInPlace: the marker of a Kubernetes run in place
// comes while the registry runs, and lasts until the next boot.
func TestOtherSlotServedInPlace(t *testing.T) {
	e := startWithOtherSlot(t, "")
	time.Sleep(100 * time.Millisecond) // time for Serve to look
	code, _ := e.manifest(t, "kube-apiserver", "v1.36.2")
	assert.Equal(t, http.StatusNotFound, code)
	require.NoError(t, os.WriteFile(e.inPlace, []byte("b\n"), 0o644))
	require.Eventually(t, func() bool {
		code, _ := e.manifest(t, "kube-apiserver", "v1.36.2")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "the staged slot's images, once firstboot names it")
	assert.Equal(t, layout.SlotB, e.mounted.Load())
	// Still served, mounted once, while the marker stays.
	time.Sleep(100 * time.Millisecond)
	code, _ = e.manifest(t, "kube-apiserver", "v1.36.2")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, int32(1), e.mounts.Load())
	assert.False(t, e.unmounted.Load())
}

func TestOtherSlotNotServedOtherwise(t *testing.T) {
	for _, tc := range []struct{ name, marker string }{
		{"no upgrade's trial", ""},
		{"a marker naming no slot", "c\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startWithOtherSlot(t, tc.marker)
			time.Sleep(100 * time.Millisecond) // time for Serve to decide
			code, _ := e.manifest(t, "kube-apiserver", "v1.36.2")
			assert.Equal(t, http.StatusNotFound, code)
			assert.Nil(t, e.mounted.Load(), "the other slot is never mounted")
			code, _ = e.manifest(t, "kube-apiserver", "v1.36.3")
			assert.Equal(t, http.StatusOK, code)
		})
	}
}
