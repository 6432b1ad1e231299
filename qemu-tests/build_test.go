package qemutests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("imagebuild build %s: %v\n%s", spec, err, b)
	}
	return readManifest(t, out)
}

// readManifest reads the manifest.json of a build's output directory.
func readManifest(t *testing.T, out string) manifest {
	t.Helper()
	var m manifest
	data, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
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
		if oa.SHA256 == "" || oa.SHA256 != ob.SHA256 {
			t.Errorf("%s differs between two builds: %s vs %s", f, oa.SHA256, ob.SHA256)
		}
		if got := sha256File(t, filepath.Join(b, ob.File)); got != ob.SHA256 {
			t.Errorf("manifest sha256 of %s is %s, file is %s", f, ob.SHA256, got)
		}
	}
	raw := filepath.Join(a, ma.Outputs["raw"].File)
	run(t, "sgdisk", "-v", raw)
	run(t, "qemu-img", "check", filepath.Join(a, ma.Outputs["qcow2"].File))
	report := run(t, "xorriso", "-indev", filepath.Join(a, ma.Outputs["iso"].File), "-report_el_torito", "as_mkisofs")
	if !strings.Contains(report, "-e '--interval:appended_partition_2") {
		t.Errorf("the ISO's El Torito EFI image is not its appended EFI partition:\n%s", report)
	}
	run(t, "qemu-img", "check", ovaDisk(t, filepath.Join(a, ma.Outputs["ova"].File)))
	for _, p := range ma.Partitions {
		switch p.Label {
		case layout.LabelESP:
			esp := extract(t, raw, p.StartMiB, p.SizeMiB)
			run(t, "fsck.fat", "-n", esp)
			checkEntries(t, esp, "terrarium-a+3.conf")
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
		if !strings.Contains(strings.ToLower(listing), "/loader/entries/"+strings.ToLower(w)) {
			t.Errorf("ESP lacks boot entry %s; fsck.fat lists:\n%s", w, listing)
		}
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
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b)
	}
	t.Logf("%s: ok", name)
	return string(b)
}
