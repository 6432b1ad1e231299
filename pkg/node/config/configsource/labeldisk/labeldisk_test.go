package labeldisk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

const (
	small = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: lonely\n"
	other = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: other\n"
)

func TestFetch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := Provider{Dir: dir}

	_, err := p.Fetch(ctx)
	require.ErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), dir, "says where it looked")

	// A disk labelled as FAT stores the label, with a signature.
	fat := filepath.Join(dir, layout.LabelConfigFAT)
	require.NoError(t, configdisk.WriteSigned(fat, []byte(small), []byte("sig")))
	f, err := p.Fetch(ctx)
	require.NoError(t, err)
	assert.Equal(t, small, string(f.Config))
	assert.Equal(t, "sig", string(f.Signature))
	assert.Equal(t, fat, f.Source)

	// The full label wins when both are present; no signature is nil.
	full := filepath.Join(dir, layout.LabelConfig)
	require.NoError(t, configdisk.Write(full, []byte(other)))
	f, err = p.Fetch(ctx)
	require.NoError(t, err)
	assert.Equal(t, other, string(f.Config))
	assert.Nil(t, f.Signature)
	assert.Equal(t, full, f.Source)
}

func TestFetchNoMachineYAML(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, layout.LabelConfig)
	d, err := diskfs.Create(dev, configdisk.Size, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	_, err = d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: layout.LabelConfigFAT})
	require.NoError(t, err)
	require.NoError(t, d.Close())

	// The disk is there but holds no config: an error, not absence.
	_, err = Provider{Dir: dir}.Fetch(context.Background())
	require.ErrorIs(t, err, ErrNoConfig)
	assert.NotErrorIs(t, err, configsource.ErrAbsent)
}

func TestFetchUnreadable(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, layout.LabelConfig)
	require.NoError(t, os.WriteFile(dev, make([]byte, 1<<20), 0o644))
	_, err := Provider{Dir: dir}.Fetch(context.Background())
	require.Error(t, err)
	assert.NotErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), dev)
}

// TestFetchISO9660: a config CD or ISO labelled TERRA-CONFIG (made by
// xorriso, which `make test` installs), as a lab without FAT tools writes
// it.
func TestFetchISO9660(t *testing.T) {
	xorriso, err := exec.LookPath("xorriso")
	require.NoError(t, err, "xorriso is installed by scripts/deps.sh (make test)")
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, configdisk.FileName), []byte(small), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, configdisk.SignatureFileName), []byte("sig"), 0o644))
	dir := t.TempDir()
	iso := filepath.Join(dir, layout.LabelConfig)
	out, err := exec.Command(xorriso, "-as", "mkisofs", "-quiet", "-R", "-V", layout.LabelConfig, "-o", iso, src).CombinedOutput()
	require.NoError(t, err, "%s", out)

	f, err := Provider{Dir: dir}.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, small, string(f.Config))
	assert.Equal(t, "sig", string(f.Signature))
}
