package squashfs

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s not found: run make deps", name)
	return p
}

// assertNotExist checks that p does not exist.
func assertNotExist(t *testing.T, p, msg string) {
	t.Helper()
	_, err := os.Stat(p)
	assert.ErrorIs(t, err, fs.ErrNotExist, "%s %s", p, msg)
}

// blockSizeBytes turns a mksquashfs -b argument ("128K", "1M", "4096")
// into bytes, as unsquashfs -s reports it.
func blockSizeBytes(t *testing.T, s string) int64 {
	t.Helper()
	num, mult := s, int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		num, mult = strings.TrimSuffix(s, "K"), 1<<10
	case strings.HasSuffix(s, "M"):
		num, mult = strings.TrimSuffix(s, "M"), 1<<20
	}
	n, err := strconv.ParseInt(num, 10, 64)
	require.NoError(t, err, "cannot parse BlockSize %q", s)
	require.Positive(t, n, "BlockSize %q", s)
	return n * mult
}

// makeTree writes a small root filesystem.
func makeTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	files := []struct {
		name, content string
		mode          os.FileMode
	}{
		{"etc/hostname", "terrarium\n", 0o644},
		{"etc/os-release", "ID=terrarium\n", 0o644},
		{"usr/bin/tool", "#!/bin/sh\necho hi\n", 0o755},
		{"usr/lib/terrarium/release.json", `{"version":"0.1.0"}` + "\n", 0o644},
		{"usr/share/big", strings.Repeat("compressible ", 200000), 0o644},
	}
	for _, f := range files {
		p := filepath.Join(root, f.name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(f.content), f.mode))
		require.NoError(t, os.Chmod(p, f.mode))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var", "empty"), 0o755))
	require.NoError(t, os.Symlink("usr/bin", filepath.Join(root, "bin")))
	return root
}

var epoch = time.Unix(1767225600, 0)

func make1(t *testing.T, dir, out string, epoch time.Time) []byte {
	t.Helper()
	require.NoError(t, Make(context.Background(), dir, out, epoch), "Make")
	assertNotExist(t, out+".partial", "left behind")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	return b
}

func TestMakeReproducible(t *testing.T) {
	requireTool(t, "mksquashfs")
	tree := makeTree(t)
	dir := t.TempDir()
	first := make1(t, tree, filepath.Join(dir, "one.squashfs"), epoch)

	// Touch the tree: mtimes must not leak into the image. A
	// SOURCE_DATE_EPOCH in the environment must not break mksquashfs,
	// which refuses it together with -mkfs-time/-all-time.
	later := time.Now().Add(time.Hour)
	require.NoError(t, filepath.Walk(tree, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, later, later)
	}))
	t.Setenv("SOURCE_DATE_EPOCH", "1000")
	second := make1(t, tree, filepath.Join(dir, "two.squashfs"), epoch)
	// bytes.Equal rather than assert.Equal: a diff of two images is noise.
	assert.True(t, bytes.Equal(first, second),
		"two Makes of the same tree differ (%d vs %d bytes)", len(first), len(second))
	require.GreaterOrEqual(t, len(first), 4, "output too short for a squashfs")
	assert.Equal(t, "hsqs", string(first[:4]), "output does not start with the squashfs magic")

	// Another epoch must change the image, or the comparison proves nothing.
	third := make1(t, tree, filepath.Join(dir, "three.squashfs"), epoch.Add(time.Hour))
	assert.False(t, bytes.Equal(first, third), "another epoch gave the same image")
}

func TestMakeContents(t *testing.T) {
	unsquashfs := requireTool(t, "unsquashfs")
	requireTool(t, "mksquashfs")
	tree := makeTree(t)
	out := filepath.Join(t.TempDir(), "slot.squashfs")
	// An old file at out is replaced, not appended to.
	require.NoError(t, os.WriteFile(out, []byte("old"), 0o644))
	make1(t, tree, out, epoch)

	list, err := exec.Command(unsquashfs, "-l", out).CombinedOutput()
	require.NoError(t, err, "unsquashfs -l\n%s", list)
	for _, want := range []string{
		"squashfs-root/etc/hostname",
		"squashfs-root/etc/os-release",
		"squashfs-root/usr/bin/tool",
		"squashfs-root/usr/lib/terrarium/release.json",
		"squashfs-root/usr/share/big",
		"squashfs-root/var/empty",
		"squashfs-root/bin",
	} {
		assert.Contains(t, string(list), want+"\n", "unsquashfs -l does not list %s", want)
	}

	// Modes, the symlink and the fixed time survive.
	long, err := exec.Command(unsquashfs, "-lln", out).CombinedOutput()
	require.NoError(t, err, "unsquashfs -lln\n%s", long)
	stamp := epoch.UTC().Format("2006-01-02 15:04")
	local := epoch.Local().Format("2006-01-02 15:04")
	for _, want := range []string{"-rwxr-xr-x", "-rw-r--r--", "lrwxrwxrwx", "squashfs-root/bin -> usr/bin"} {
		assert.Contains(t, string(long), want, "unsquashfs -lln lacks %q", want)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(long)), "\n") {
		if !strings.Contains(line, "squashfs-root") {
			continue
		}
		assert.True(t, strings.Contains(line, stamp) || strings.Contains(line, local),
			"entry not stamped %s: %s", stamp, line)
	}

	// Content round trip.
	dest := filepath.Join(t.TempDir(), "x")
	b, err := exec.Command(unsquashfs, "-d", dest, "-no-progress", out).CombinedOutput()
	require.NoError(t, err, "unsquashfs\n%s", b)
	for _, f := range []string{"etc/hostname", "usr/share/big"} {
		want, err := os.ReadFile(filepath.Join(tree, f))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dest, f))
		if assert.NoError(t, err, "%s after unsquashfs", f) {
			assert.True(t, bytes.Equal(got, want),
				"%s after unsquashfs: %d bytes; want %d bytes", f, len(got), len(want))
		}
	}

	// lz4-compressed as documented, in blocks of BlockSize.
	sb, err := exec.Command(unsquashfs, "-s", out).CombinedOutput()
	require.NoError(t, err, "unsquashfs -s\n%s", sb)
	assert.Contains(t, string(sb), "Compression lz4", "want lz4 compression")
	assert.Contains(t, strings.Split(string(sb), "\n"),
		fmt.Sprintf("Block size %d", blockSizeBytes(t, BlockSize)),
		"want the block size of BlockSize %q", BlockSize)
}

func TestMakeCompressed(t *testing.T) {
	unsquashfs := requireTool(t, "unsquashfs")
	requireTool(t, "mksquashfs")
	tree := makeTree(t)
	want, err := os.ReadFile(filepath.Join(tree, "usr/share/big"))
	require.NoError(t, err)
	for _, tc := range []struct {
		c    Compression
		line string
	}{
		{LZ4, "Compression lz4"},
		{ZSTD, "Compression zstd"},
	} {
		t.Run(string(tc.c), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "slot.squashfs")
			require.NoError(t, MakeCompressed(context.Background(), tree, out, epoch, tc.c))
			sb, err := exec.Command(unsquashfs, "-s", out).CombinedOutput()
			require.NoError(t, err, "unsquashfs -s\n%s", sb)
			assert.Contains(t, string(sb), tc.line)
			dest := filepath.Join(t.TempDir(), "x")
			b, err := exec.Command(unsquashfs, "-d", dest, "-no-progress", out).CombinedOutput()
			require.NoError(t, err, "unsquashfs\n%s", b)
			got, err := os.ReadFile(filepath.Join(dest, "usr/share/big"))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(got, want), "usr/share/big after unsquashfs: %d bytes; want %d", len(got), len(want))
		})
	}
}

func TestMakeCompressedUnknown(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.squashfs")
	err := MakeCompressed(context.Background(), makeTree(t), out, epoch, "xz")
	require.Error(t, err)
	assert.ErrorContains(t, err, `"xz"`)
	assert.ErrorContains(t, err, `"lz4"`, "the error names what is known")
	assertNotExist(t, out, "exists after a refused compression")
}

func TestMakeError(t *testing.T) {
	requireTool(t, "mksquashfs")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.squashfs")
	missing := filepath.Join(dir, "no-such-tree")
	err := Make(context.Background(), missing, out, epoch)
	require.Error(t, err, "Make of a missing tree succeeded")
	for _, want := range []string{"mksquashfs", missing} {
		assert.ErrorContains(t, err, want, "error should name mksquashfs and the tree")
	}
	for _, p := range []string{out, out + ".partial"} {
		assertNotExist(t, p, "exists after a failed Make")
	}
}

func TestMakeCanceled(t *testing.T) {
	requireTool(t, "mksquashfs")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "out.squashfs")
	assert.Error(t, Make(ctx, makeTree(t), out, epoch), "Make with a canceled context succeeded")
	assertNotExist(t, out, "exists after a canceled Make")
}
