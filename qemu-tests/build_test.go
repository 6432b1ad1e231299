package qemutests

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

type manifest struct {
	Partitions []struct {
		Label    string `json:"label"`
		StartMiB int64  `json:"startMiB"`
		SizeMiB  int64  `json:"sizeMiB"`
	} `json:"partitions"`
	Outputs map[string]struct {
		File   string `json:"file"`
		SHA256 string `json:"sha256"`
	} `json:"outputs"`
	SecureBoot *struct {
		LiveUKI *struct {
			File string `json:"file"`
		} `json:"liveUKI"`
	} `json:"secureBoot"`
}

func buildDefault(ctx context.Context, t *testing.T, out string) manifest {
	t.Helper()
	return buildSpec(ctx, t, "../os/terrarium.yaml", out)
}

// buildSpec runs `imagebuild build` for spec into out and returns the
// manifest it wrote.
func buildSpec(ctx context.Context, t *testing.T, spec, out string) manifest {
	t.Helper()
	bin := fixture(t, "TERRARIUM_BIN")
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "build", "--spec", spec, "--out", out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "imagebuild build %s: %s", spec, b)
	return readManifest(t, out)
}

// readManifest reads the manifest.json of a build's output directory.
func readManifest(t *testing.T, out string) manifest {
	t.Helper()
	var m manifest
	data, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// TestReproducibleAndValid: two builds from the same inputs give
// byte-identical raw, qcow2, ISO and OVA images (their manifests say so,
// and the files agree), and the standard tools accept every part. The
// first build is `make image`'s, beside TERRARIUM_IMAGE.
func TestReproducibleAndValid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := filepath.Dir(fixture(t, "TERRARIUM_IMAGE")), t.TempDir()
	ma, mb := readManifest(t, a), buildDefault(ctx, t, b)
	for _, f := range []string{"raw", "qcow2", "iso", "ova"} {
		oa, ob := ma.Outputs[f], mb.Outputs[f]
		assert.NotEmpty(t, oa.SHA256, "%s in the manifest", f)
		assert.Equal(t, oa.SHA256, ob.SHA256, "%s differs between two builds", f)
		assert.Equal(t, ob.SHA256, sha256File(t, filepath.Join(b, ob.File)), "the manifest's sha256 of %s against the file", f)
	}
	raw := filepath.Join(a, ma.Outputs["raw"].File)
	run(t, "sgdisk", "-v", raw)
	run(t, "qemu-img", "check", filepath.Join(a, ma.Outputs["qcow2"].File))
	report := run(t, "xorriso", "-indev", filepath.Join(a, ma.Outputs["iso"].File), "-report_el_torito", "as_mkisofs")
	assert.Contains(t, report, "-e '--interval:appended_partition_2", "the ISO's El Torito EFI image is its appended EFI partition")
	run(t, "qemu-img", "check", ovaDisk(t, filepath.Join(a, ma.Outputs["ova"].File)))
	for _, p := range ma.Partitions {
		switch p.Label {
		case layout.LabelESP:
			esp := extract(t, raw, p.StartMiB, p.SizeMiB)
			run(t, "fsck.fat", "-n", esp)
			checkEntries(t, esp, "terrarium-a+3.conf")
			listing := strings.ToLower(run(t, "fsck.fat", "-n", "-l", esp))
			for _, f := range []string{layout.ESPGrubConfig, layout.ESPGrubEnv} {
				assert.Contains(t, listing, "/"+f, "GRUB's files for BIOS boot on the ESP")
			}
		case layout.LabelBIOSBoot:
			// GRUB's boot code in the MBR loads the core image from
			// the partition's first sector (pkg/image/biosboot).
			f, err := os.Open(raw)
			require.NoError(t, err)
			mbr := make([]byte, 512)
			_, err = f.ReadAt(mbr, 0)
			_ = f.Close() // read only
			require.NoError(t, err)
			assert.Equal(t, uint64(p.StartMiB*layout.MiB/512), binary.LittleEndian.Uint64(mbr[0x5c:]), "the MBR's boot code points at BIOS-BOOT")
			assert.Equal(t, []byte{0x55, 0xaa}, mbr[510:], "the protective MBR's signature")
		case layout.LabelSlotA:
			run(t, "unsquashfs", "-l", "-o", fmt.Sprint(p.StartMiB*layout.MiB), raw, "/usr/bin/firstboot")
		}
	}
}

// checkEntries asserts the ESP holds the named boot entries, listed by
// fsck.fat itself. FAT names are case-insensitive (and so are the
// firmware's and Linux's lookups): mcopy stores "loader" as the short name
// LOADER, which fsck.fat lists as such, while an entry's long name keeps
// its case.
func checkEntries(t *testing.T, esp string, want ...string) {
	t.Helper()
	listing := run(t, "fsck.fat", "-n", "-l", esp)
	for _, w := range want {
		assert.Contains(t, strings.ToLower(listing), "/loader/entries/"+strings.ToLower(w), "the ESP's boot entry %s, as fsck.fat lists it", w)
	}
}

func extract(t *testing.T, raw string, startMiB, sizeMiB int64) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "part.img")
	run(t, "dd", "if="+raw, "of="+out, "bs=1M", fmt.Sprintf("skip=%d", startMiB), fmt.Sprintf("count=%d", sizeMiB), "status=none")
	return out
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, b)
	t.Logf("%s: ok", name)
	return string(b)
}
