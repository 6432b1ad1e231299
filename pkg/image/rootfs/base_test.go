package rootfs

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

func TestBaseVersions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    map[string]string
	}{
		{
			name:    "dpkg-query lines",
			content: "base-files 13.1\nlinux-image-amd64 6.1.0-x\nsystemd 252.30-1~deb12u2\n",
			want:    map[string]string{"base-files": "13.1", "linux-image-amd64": "6.1.0-x", "systemd": "252.30-1~deb12u2"},
		},
		{
			name:    "epoch version and no final newline",
			content: "tzdata 2024a-0+deb12u1\nlibc6 1:2.36-9",
			want:    map[string]string{"tzdata": "2024a-0+deb12u1", "libc6": "1:2.36-9"},
		},
		{
			name:    "line without a version is left out",
			content: "dpkg 1.21.22\nbroken\n",
			want:    map[string]string{"dpkg": "1.21.22"},
		},
		{
			name:    "only the first space separates",
			content: "odd 1.0 extra\n",
			want:    map[string]string{"odd": "1.0 extra"},
		},
		{name: "empty file", content: "", want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, BaseVersions), []byte(tc.content), 0o644))
			got, err := (&Base{Dir: dir}).Versions()
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestBaseVersionsMissing(t *testing.T) {
	dir := t.TempDir()
	got, err := (&Base{Dir: dir}).Versions()
	require.Error(t, err)
	assert.Nil(t, got)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), "read package versions")
	assert.Contains(t, err.Error(), filepath.Join(dir, BaseVersions))
}

func TestBaseKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content *string
		want    string
	}{
		{name: "written by extractBootArtifacts", content: ptr("6.1.0-x\n"), want: "6.1.0-x"},
		{name: "surrounding space trimmed", content: ptr("  6.12.0-1-amd64 \n\n"), want: "6.12.0-1-amd64"},
		{name: "empty file", content: ptr(""), want: ""},
		{name: "missing file", content: nil, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != nil {
				writeFiles(t, dir, map[string]string{BaseKernelRelease: *tc.content})
			}
			assert.Equal(t, tc.want, (&Base{Dir: dir}).KernelVersion())
		})
	}
}

func ptr(s string) *string { return &s }

// bootTree is a rootfs tarball's content with exactly one kernel.
func bootTree() []entry {
	return []entry{
		tDir("./"),
		tDir("boot/"),
		tFile("boot/vmlinuz-6.1.0-x", "kernel image"),
		tFile("boot/config-6.1.0-x", "CONFIG_X=y\n"),
		tDir("etc/"),
		tFile("etc/hostname", "debian\n"),
		tDir("usr/"),
		tDir("usr/bin/"),
		tExe("usr/bin/busybox", "busybox binary"),
		tExe("usr/bin/bash", "bash binary"),
		tDir("usr/lib/"),
		tDir("usr/lib/modules/"),
		tDir("usr/lib/modules/6.1.0-x/"),
		tDir("usr/lib/modules/6.1.0-x/kernel/"),
		tFile("usr/lib/modules/6.1.0-x/kernel/a.ko", "module a"),
		tFile("usr/lib/modules/6.1.0-x/modules.dep", "kernel/a.ko:\n"),
		tDir("usr/lib/systemd/"),
		tDir("usr/lib/systemd/boot/"),
		tDir("usr/lib/systemd/boot/efi/"),
		tFile("usr/lib/systemd/boot/efi/systemd-bootx64.efi", "MZ systemd-boot"),
		tFile("usr/lib/systemd/boot/efi/linuxx64.efi.stub", "MZ stub"),
		tDir("usr/lib/grub/"),
		tDir("usr/lib/grub/i386-pc/"),
		tFile("usr/lib/grub/i386-pc/boot.img", "GRUB boot.img"),
		tFile("usr/lib/grub/i386-pc/boot_hybrid.img", "GRUB boot_hybrid.img"),
		tFile("usr/lib/grub/i386-pc/normal.mod", "a module"),
	}
}

func TestExtractBootArtifacts(t *testing.T) {
	requireTool(t, "tar")
	dir := t.TempDir()
	tarPath := filepath.Join(dir, BaseTar)
	writeTar(t, tarPath, bootTree())

	require.NoError(t, extractBootArtifacts(context.Background(), tarPath, dir))

	for name, want := range map[string]string{
		BaseKernel:         "kernel image",
		BaseSDBoot:         "MZ systemd-boot",
		BaseBusybox:        "busybox binary",
		BaseGrubBoot:       "GRUB boot.img",
		BaseGrubBootHybrid: "GRUB boot_hybrid.img",
		filepath.Join(BaseModules, "kernel", "a.ko"): "module a",
		filepath.Join(BaseModules, "modules.dep"):    "kernel/a.ko:\n",
		BaseKernelRelease:                            "6.1.0-x\n",
	} {
		assert.Equal(t, want, readFile(t, filepath.Join(dir, name)), name)
	}
	fi, err := os.Stat(filepath.Join(dir, BaseModules))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "%s is the module tree itself, not its parent", BaseModules)
	assert.Equal(t, "6.1.0-x", (&Base{Dir: dir}).KernelVersion())

	// Only the boot artifacts came out, and the scratch directory is gone.
	var top []string
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		top = append(top, e.Name())
	}
	assert.ElementsMatch(t, []string{BaseTar, "boot"}, top)
	var boot []string
	require.NoError(t, filepath.WalkDir(filepath.Join(dir, "boot"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			boot = append(boot, rel)
		}
		return nil
	}))
	assert.ElementsMatch(t, []string{
		BaseKernel, BaseSDBoot, BaseBusybox, BaseKernelRelease, BaseGrubBoot, BaseGrubBootHybrid,
		filepath.Join(BaseModules, "kernel", "a.ko"), filepath.Join(BaseModules, "modules.dep"),
	}, boot)
}

func TestExtractBootArtifactsErrors(t *testing.T) {
	requireTool(t, "tar")
	without := func(name string) []entry {
		var out []entry
		for _, e := range bootTree() {
			if e.name != name {
				out = append(out, e)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		entries []entry // nil: no tarball at all
		want    []string
	}{
		{
			name:    "two kernels",
			entries: append(bootTree(), tFile("boot/vmlinuz-6.1.0-y", "other kernel")),
			want:    []string{"linux-image-amd64", "found 2 and 1"},
		},
		{
			name:    "two module trees",
			entries: append(bootTree(), tDir("usr/lib/modules/6.1.0-y/"), tFile("usr/lib/modules/6.1.0-y/b.ko", "b")),
			want:    []string{"linux-image-amd64", "found 1 and 2"},
		},
		{
			name:    "no kernel",
			entries: without("boot/vmlinuz-6.1.0-x"),
			want:    []string{"extract boot artifacts from", "vmlinuz-*", "os.packages must include linux-image-amd64"},
		},
		{
			name:    "no busybox",
			entries: without("usr/bin/busybox"),
			want:    []string{"extract boot artifacts from", "busybox", "busybox-static"},
		},
		{
			name:    "no GRUB",
			entries: without("usr/lib/grub/i386-pc/boot.img"),
			want:    []string{"extract boot artifacts from", "boot.img", "grub-pc-bin"},
		},
		{
			name:    "no systemd-boot",
			entries: without("usr/lib/systemd/boot/efi/systemd-bootx64.efi"),
			want:    []string{"extract boot artifacts from", "systemd-bootx64.efi"},
		},
		{
			name: "no tarball",
			want: []string{"extract boot artifacts from"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tarPath := filepath.Join(dir, BaseTar)
			if tc.entries != nil {
				writeTar(t, tarPath, tc.entries)
			}
			err := extractBootArtifacts(context.Background(), tarPath, dir)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tarPath)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			_, statErr := os.Stat(filepath.Join(dir, BaseKernelRelease))
			assert.ErrorIs(t, statErr, fs.ErrNotExist, "a failed extraction wrote %s", BaseKernelRelease)
			leftovers, _ := filepath.Glob(filepath.Join(dir, "extract-*"))
			assert.Empty(t, leftovers, "scratch directories left behind")
		})
	}
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		want string
	}{
		{name: "fewer lines than n", in: "a\nb\n", n: 40, want: "a\nb"},
		{name: "exactly n", in: "a\nb\nc", n: 3, want: "a\nb\nc"},
		{name: "keeps the last n", in: "1\n2\n3\n4\n5\n", n: 2, want: "4\n5"},
		{name: "trailing blank lines dropped", in: "x\ny\n\n\n", n: 1, want: "y"},
		{name: "inner blank line kept", in: "x\n\ny\n", n: 2, want: "\ny"},
		{name: "empty", in: "", n: 40, want: ""},
		{name: "zero lines", in: "a\nb\n", n: 0, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tail([]byte(tc.in), tc.n))
		})
	}
	long := make([]string, 100)
	for i := range long {
		long[i] = "line " + strconv.Itoa(i)
	}
	got := tail([]byte(strings.Join(long, "\n")+"\n"), 40)
	assert.Equal(t, strings.Join(long[60:], "\n"), got)
}

// baseKey is BuildBase's cache key, for seeding the cache.
func baseKey(t *testing.T, o spec.OS) string {
	t.Helper()
	key, err := BaseKey(o, nil, epoch)
	require.NoError(t, err)
	return key
}

func TestBuildBaseCacheHit(t *testing.T) {
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	o := spec.OS{Suite: "bookworm", Mirror: "http://deb.debian.org/debian", Packages: []string{"systemd", "linux-image-amd64", "busybox"}}
	key := baseKey(t, o)
	entry := writeFiles(t, c.Path("rootfs-base", key), map[string]string{
		BaseVersions:      "busybox 1:1.35.0-4\nsystemd 252.30\n",
		BaseKernelRelease: "6.1.0-x\n",
	})
	// mmdebstrap must not run on a hit: make sure it cannot be found.
	t.Setenv("PATH", t.TempDir())

	for name, pkgs := range map[string][]string{
		"same order":  {"systemd", "linux-image-amd64", "busybox"},
		"other order": {"busybox", "systemd", "linux-image-amd64"},
	} {
		t.Run(name, func(t *testing.T) {
			in := o
			in.Packages = append([]string(nil), pkgs...)
			b, err := BuildBase(context.Background(), c, in, nil, epoch, discard)
			require.NoError(t, err)
			assert.True(t, b.Cached)
			assert.Equal(t, entry, b.Dir)
			assert.Equal(t, key, b.Key)
			assert.Equal(t, pkgs, in.Packages, "BuildBase reordered the caller's package list")
			assert.Equal(t, "6.1.0-x", b.KernelVersion())
			v, err := b.Versions()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"busybox": "1:1.35.0-4", "systemd": "252.30"}, v)
		})
	}
}

func TestBuildBaseKeyInputs(t *testing.T) {
	o := spec.OS{Suite: "bookworm", Mirror: "http://deb.debian.org/debian", Packages: []string{"systemd", "linux-image-amd64"}}
	ref := baseKey(t, o)
	for name, change := range map[string]func(*spec.OS){
		"suite":         func(o *spec.OS) { o.Suite = "trixie" },
		"mirror":        func(o *spec.OS) { o.Mirror = "http://mirror.example/debian" },
		"extra package": func(o *spec.OS) { o.Packages = append(o.Packages, "vim") },
	} {
		t.Run(name, func(t *testing.T) {
			c, err := cache.New(t.TempDir())
			require.NoError(t, err)
			// Seed the entry of the reference inputs: changed inputs must miss it.
			writeFiles(t, c.Path("rootfs-base", ref), map[string]string{BaseVersions: "x 1\n"})
			t.Setenv("PATH", t.TempDir())
			in := o
			in.Packages = append([]string(nil), o.Packages...)
			change(&in)
			b, err := BuildBase(context.Background(), c, in, nil, epoch, discard)
			require.Error(t, err, "a changed %s hit the reference entry", name)
			assert.Nil(t, b)
			assert.Contains(t, err.Error(), "mmdebstrap "+in.Suite)
			ents, err := os.ReadDir(filepath.Join(c.Root(), "rootfs-base"))
			require.NoError(t, err)
			require.Len(t, ents, 1, "a failed build left an entry or a temporary directory")
			assert.Equal(t, ref, ents[0].Name())
		})
	}
}
