package build

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/ova"
)

// rawImage writes a small raw image: a pattern in its first MiB, zeros
// after, not a whole number of 64 KiB grains.
func rawImage(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	raw := make([]byte, 2<<20+3*512)
	for i := range 1 << 20 {
		raw[i] = byte(i*7 + i>>9)
	}
	path := filepath.Join(dir, "terrarium.raw")
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	return path, raw
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestVSphereStages(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	require.NoError(t, err, "qemu-img not found: run make deps")
	ctx := context.Background()
	dir := t.TempDir()
	raw, content := rawImage(t, dir)

	img, err := writeVMDK(ctx, raw, filepath.Join(dir, "terrarium.vmdk"), "terrarium.vmdk", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	fi, err := os.Stat(img.path)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), img.stats.Size)
	assert.Equal(t, int64(len(content)), img.stats.Capacity)
	back := filepath.Join(t.TempDir(), "back.raw")
	out, err := exec.Command(qemuImg, "convert", "-f", "vmdk", "-O", "raw", img.path, back).CombinedOutput()
	require.NoError(t, err, "%s", out)
	got, err := os.ReadFile(back)
	require.NoError(t, err)
	require.True(t, bytes.Equal(content, got), "the VMDK reads back other bytes")

	in := ovaInputs{name: "terrarium", version: "0.1.0", disk: img, hardwareVersion: 17, epoch: time.Unix(1767225600, 0)}
	dst := filepath.Join(dir, "terrarium.ova")
	require.NoError(t, writeOVA(ctx, in, dst))
	f, err := os.Open(dst)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	assert.Equal(t, []string{"terrarium.ovf", "terrarium.mf", "terrarium.vmdk"}, names)
	assert.Equal(t, []string{"terrarium.ova", "terrarium.raw", "terrarium.vmdk"}, dirEntries(t, dir), "no temporary files left")

	again := filepath.Join(t.TempDir(), "terrarium.ova")
	require.NoError(t, writeOVA(ctx, in, again))
	a, err := os.ReadFile(dst)
	require.NoError(t, err)
	b, err := os.ReadFile(again)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(a, b), "two OVAs of the same VMDK differ")
}

func TestVSphereStageErrors(t *testing.T) {
	dir := t.TempDir()
	raw, _ := rawImage(t, dir)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	log := slog.New(slog.DiscardHandler)

	_, err := writeVMDK(context.Background(), filepath.Join(dir, "missing.raw"), filepath.Join(dir, "a.vmdk"), "a.vmdk", log)
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), "open the raw image")

	_, err = writeVMDK(canceled, raw, filepath.Join(dir, "b.vmdk"), "b.vmdk", log)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), raw)

	img, err := writeVMDK(context.Background(), raw, filepath.Join(dir, "c.vmdk"), "c.vmdk", log)
	require.NoError(t, err)
	err = writeOVA(context.Background(), ovaInputs{name: "c", disk: img, hardwareVersion: 12}, filepath.Join(dir, "c.ova"))
	require.ErrorIs(t, err, ova.ErrHardwareVersion)
	err = writeOVA(canceled, ovaInputs{name: "c", disk: img, hardwareVersion: 13, epoch: time.Unix(0, 0)}, filepath.Join(dir, "d.ova"))
	require.ErrorIs(t, err, context.Canceled)
	err = writeOVA(context.Background(), ovaInputs{name: "c", disk: vmdkImage{path: filepath.Join(dir, "none.vmdk")}, hardwareVersion: 13}, filepath.Join(dir, "e.ova"))
	require.ErrorIs(t, err, fs.ErrNotExist)

	assert.Equal(t, []string{"c.vmdk", "terrarium.raw"}, dirEntries(t, dir), "failed stages leave no file behind")
}
