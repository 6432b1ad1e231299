package esp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s not found: run make deps", name)
	return p
}

// hostFiles writes fake boot files and returns Contents using them.
func hostFiles(t *testing.T) Contents {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	// Sizes chosen to span several clusters and end mid-cluster.
	sdboot := write("systemd-bootx64.efi", bytes.Repeat([]byte("MZ systemd-boot "), 5000))
	return Contents{
		SystemdBoot:    sdboot,
		TimeoutSeconds: 0,
		Entries: []Entry{
			{
				Slot: layout.SlotA, Title: "Terrarium 1.0 (slot A)", Version: "1.0",
				Kernel:  write("vmlinuz-a", bytes.Repeat([]byte("kernel A "), 30000)),
				Initrd:  write("initrd-a", bytes.Repeat([]byte("initrd A "), 7000)),
				Cmdline: []string{"console=ttyS0", "quiet"},
				Tries:   3, SortKey: "terrarium-1",
			},
			{
				Slot: layout.SlotB, Title: "Terrarium 1.0 (slot B)", Version: "1.0",
				Kernel:  write("vmlinuz-b", []byte("kernel B")),
				Initrd:  write("initrd-b", []byte("initrd B")),
				Cmdline: nil,
				Tries:   0, SortKey: "terrarium-2",
			},
		},
	}
}

func TestFiles(t *testing.T) {
	c := hostFiles(t)
	files := c.Files()
	want := map[string]string{
		"EFI/BOOT/BOOTX64.EFI":            "file:" + c.SystemdBoot,
		"EFI/systemd/systemd-bootx64.efi": "file:" + c.SystemdBoot,
		"terrarium/a/vmlinuz":             "file:" + c.Entries[0].Kernel,
		"terrarium/a/initrd.img":          "file:" + c.Entries[0].Initrd,
		"terrarium/b/vmlinuz":             "file:" + c.Entries[1].Kernel,
		"terrarium/b/initrd.img":          "file:" + c.Entries[1].Initrd,
		"loader/loader.conf": "# Written by Terrarium imagebuild.\n" +
			"timeout 0\n" +
			"default terrarium-*\n" +
			"editor no\n" +
			"auto-entries no\n" +
			"auto-firmware no\n" +
			"console-mode keep\n",
		"loader/entries/terrarium-a+3.conf": "title Terrarium 1.0 (slot A)\n" +
			"version 1.0\n" +
			"sort-key terrarium-1\n" +
			"linux /terrarium/a/vmlinuz\n" +
			"initrd /terrarium/a/initrd.img\n" +
			"options console=ttyS0 quiet terrarium.slot=a\n",
		"loader/entries/terrarium-b.conf": "title Terrarium 1.0 (slot B)\n" +
			"version 1.0\n" +
			"sort-key terrarium-2\n" +
			"linux /terrarium/b/vmlinuz\n" +
			"initrd /terrarium/b/initrd.img\n" +
			"options terrarium.slot=b\n",
	}
	assert.Equal(t, want, files)
	// Files must not change the entry's Cmdline (it appends the slot).
	assert.Equal(t, []string{"console=ttyS0", "quiet"}, c.Entries[0].Cmdline, "Files changed Entries[0].Cmdline")
}

func TestEntryConf(t *testing.T) {
	tests := []struct {
		name  string
		entry Entry
		file  string
		opts  string
	}{
		{"counting a", Entry{Slot: layout.SlotA, Tries: 3, Cmdline: []string{"quiet"}}, "terrarium-a+3.conf", "options quiet terrarium.slot=a"},
		{"counting b", Entry{Slot: layout.SlotB, Tries: 1}, "terrarium-b+1.conf", "options terrarium.slot=b"},
		{"blessed", Entry{Slot: layout.SlotA, Tries: 0, Cmdline: []string{"a=1", "b"}}, "terrarium-a.conf", "options a=1 b terrarium.slot=a"},
		{"install id", Entry{ID: "terrarium-install", Slot: layout.SlotA, Tries: 0, Cmdline: []string{"terrarium.live", "terrarium.install=auto"}}, "terrarium-install.conf", "options terrarium.live terrarium.install=auto terrarium.slot=a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Contents{SystemdBoot: "/x", TimeoutSeconds: 5, Entries: []Entry{tt.entry}}
			files := c.Files()
			require.Contains(t, files, "loader/entries/"+tt.file)
			conf := files["loader/entries/"+tt.file]
			lines := strings.Split(strings.TrimSuffix(conf, "\n"), "\n")
			last := lines[len(lines)-1]
			assert.Equal(t, tt.opts, last, "options line")
			assert.True(t, strings.HasSuffix(last, " terrarium.slot="+string(tt.entry.Slot)), "options line %q does not end with the slot", last)
			assert.Contains(t, files["loader/loader.conf"], "\ntimeout 5\n", "loader.conf lacks timeout 5")
			assert.Len(t, files, 6, "files for one entry")
		})
	}
}

// TestFilesSecureBoot: a Secure Boot image's ESP has one UKI per slot in
// place of the kernel and initramfs, entries that start it with "efi" and
// carry no command line, the enrollment files, and loader.conf's
// secure-boot-enroll; a Secure Boot ESP is written and read back whole.
func TestFilesSecureBoot(t *testing.T) {
	c := hostFiles(t)
	dir := t.TempDir()
	for i := range c.Entries {
		c.Entries[i].UKI = filepath.Join(dir, "uki-"+string(c.Entries[i].Slot))
		require.NoError(t, os.WriteFile(c.Entries[i].UKI, bytes.Repeat([]byte("MZ uki "+string(c.Entries[i].Slot)), 9000), 0o644))
	}
	c.EnrollKeys = map[string]string{}
	for _, name := range []string{"PK.auth", "KEK.auth", "db.auth"} {
		c.EnrollKeys[name] = filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(c.EnrollKeys[name], []byte("auth "+name), 0o644))
	}
	c.SecureBootEnroll = "if-safe"
	files := c.Files()

	assert.Equal(t, "title Terrarium 1.0 (slot A)\nversion 1.0\nsort-key terrarium-1\nefi /terrarium/a/terrarium.efi\n",
		files["loader/entries/terrarium-a+3.conf"])
	assert.Equal(t, "title Terrarium 1.0 (slot B)\nversion 1.0\nsort-key terrarium-2\nefi /terrarium/b/terrarium.efi\n",
		files["loader/entries/terrarium-b.conf"])
	for _, slot := range layout.Slots() {
		assert.Equal(t, "file:"+filepath.Join(dir, "uki-"+string(slot)), files[slot.UKIPath()])
		assert.NotContains(t, files, slot.KernelPath(), "a Secure Boot ESP carries no bare kernel")
		assert.NotContains(t, files, slot.InitrdPath(), "a Secure Boot ESP carries no bare initramfs")
	}
	for name, host := range c.EnrollKeys {
		assert.Equal(t, "file:"+host, files["loader/keys/auto/"+name])
	}
	assert.True(t, strings.HasSuffix(files["loader/loader.conf"], "\nsecure-boot-enroll if-safe\n"), "loader.conf:\n%s", files["loader/loader.conf"])
	assert.Len(t, files, 2+1+2+2+3, "boot loader twice, loader.conf, two entries, two UKIs, three enrollment files")

	img := filepath.Join(t.TempDir(), "esp.img")
	require.NoError(t, Write(context.Background(), img, 64*layout.MiB, c, time.Unix(1767225600, 0)))
	checkContent(t, img, c)

	// Without enrollment files loader.conf says nothing of enrolling.
	c.EnrollKeys = nil
	assert.NotContains(t, c.Files()["loader/loader.conf"], "secure-boot-enroll")
}

func TestWriteFsck(t *testing.T) {
	fsck := requireTool(t, "fsck.fat")
	tests := []struct {
		name string
		size int64
		// empty makes slot B's initrd an empty file.
		empty bool
	}{
		{name: "64MiB", size: 64 * layout.MiB},
		{name: "65MiB", size: 65 * layout.MiB},
		{name: "256MiB default", size: 256 * layout.MiB},
		{name: "empty file", size: 65 * layout.MiB, empty: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := hostFiles(t)
			if tt.empty {
				require.NoError(t, os.WriteFile(c.Entries[1].Initrd, nil, 0o644))
			}
			img := filepath.Join(t.TempDir(), "esp.img")
			// A stale file at the path is replaced.
			require.NoError(t, os.WriteFile(img, []byte("stale"), 0o644))
			err := Write(context.Background(), img, tt.size, c, time.Unix(1767225600, 0))
			if tt.empty {
				// An empty kernel or initramfs is a broken input.
				assert.ErrorContains(t, err, "is empty", "Write with an empty initrd")
				assert.ErrorContains(t, err, "terrarium/b/initrd.img", "the error names the ESP path")
				return
			}
			require.NoError(t, err, "Write")
			fi, err := os.Stat(img)
			require.NoError(t, err)
			assert.Equal(t, tt.size, fi.Size(), "image size in bytes")
			out, err := exec.Command(fsck, "-n", "-v", img).CombinedOutput()
			require.NoError(t, err, "fsck.fat -n %s:\n%s", img, out)
			for _, bad := range []string{"wrong", "invalid", "bad", "truncating", "leaving filesystem unchanged"} {
				assert.False(t, bytes.Contains(bytes.ToLower(out), []byte(bad)), "fsck.fat reports %q:\n%s", bad, out)
			}
			assert.True(t, bytes.Contains(out, []byte("32 bit entries")), "fsck.fat does not see FAT32 (32 bit entries):\n%s", out)
			lbl, err := exec.Command(requireTool(t, "fatlabel"), img).Output()
			if assert.NoError(t, err, "fatlabel %s", img) {
				assert.Equal(t, layout.LabelESPFS, strings.TrimSpace(string(lbl)), "volume label")
			}
			checkContent(t, img, c)
		})
	}
}

// checkContent reads every file of c back from the image.
func checkContent(t *testing.T, img string, c Contents) {
	t.Helper()
	d, err := diskfs.Open(img, diskfs.WithOpenMode(diskfs.ReadOnly))
	require.NoError(t, err)
	defer d.Close()
	fs, err := d.GetFilesystem(0)
	require.NoError(t, err)
	for name, src := range c.Files() {
		want := []byte(src)
		if host, ok := strings.CutPrefix(src, "file:"); ok {
			want, err = os.ReadFile(host)
			require.NoError(t, err)
		}
		got, err := fs.ReadFile(name)
		if !assert.NoError(t, err, "read %s from the ESP", name) {
			continue
		}
		// Not assert.Equal: a hex dump of a whole kernel helps no one.
		assert.True(t, bytes.Equal(got, want), "%s on the ESP: %d bytes, want %d (content differs)", name, len(got), len(want))
	}
}

func TestWriteReproducible(t *testing.T) {
	requireTool(t, "fsck.fat")
	c := hostFiles(t)
	dir := t.TempDir()
	const size = 64 * layout.MiB
	epoch := time.Unix(1767225600, 0)
	var images [][]byte
	for _, name := range []string{"one.img", "two.img"} {
		p := filepath.Join(dir, name)
		require.NoError(t, Write(context.Background(), p, size, c, epoch), "Write %s", name)
		// The next Write reads sources with other times: none may leak in.
		later := time.Now().Add(-time.Hour)
		require.NoError(t, os.Chtimes(c.Entries[0].Kernel, later, later))
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		images = append(images, b)
	}
	// Not assert.Equal: a hex dump of 65 MiB helps no one.
	assert.True(t, bytes.Equal(images[0], images[1]), "two Writes differ at byte %d", firstDiff(images[0], images[1]))

	// A different epoch must show in the image (so the comparison above
	// would notice time leaking in).
	p := filepath.Join(dir, "three.img")
	require.NoError(t, Write(context.Background(), p, size, c, time.Unix(1600000000, 0)))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.False(t, bytes.Equal(images[0], b), "changing the epoch did not change the image")
}

func TestWriteMissingSource(t *testing.T) {
	c := hostFiles(t)
	c.Entries[1].Kernel = filepath.Join(t.TempDir(), "no-such-kernel")
	img := filepath.Join(t.TempDir(), "esp.img")
	err := Write(context.Background(), img, 64*layout.MiB, c, time.Unix(1767225600, 0))
	require.Error(t, err, "Write with a missing kernel succeeded")
	assert.ErrorContains(t, err, "terrarium/b/vmlinuz", "the error names the ESP path")
	assert.ErrorContains(t, err, img, "the error names the image")
}

// TestWriteTooFull: files that fit the partition but not beside the FAT's
// own tables get a message naming the setting to change, not mcopy's.
func TestWriteTooFull(t *testing.T) {
	requireTool(t, "mcopy")
	c := hostFiles(t)
	require.NoError(t, os.WriteFile(c.Entries[0].Kernel, bytes.Repeat([]byte{1}, 62*int(layout.MiB)+512*1024), 0o644))
	img := filepath.Join(t.TempDir(), "esp.img")
	err := Write(context.Background(), img, 64*layout.MiB, c, time.Unix(1767225600, 0))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "make it larger (disk.espSizeMiB)")
	assert.NoFileExists(t, img, "no half-filled image is left")
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestWriteSmall: the ISO's El Torito image is FAT16, fits the catalog's
// 16-bit sector count, holds every file (fsck.fat lists them), and comes
// out the same twice although the source files' times differ.
func TestWriteSmall(t *testing.T) {
	requireTool(t, "mkfs.fat")
	requireTool(t, "mcopy")
	c := hostFiles(t)
	c.Entries[1].ID = "terrarium-install"
	epoch := time.Unix(1767225600, 0)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	require.NoError(t, WriteSmall(context.Background(), a, c, epoch))
	later := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(c.SystemdBoot, later, later))
	time.Sleep(1100 * time.Millisecond) // a second later, for any time that leaks in
	require.NoError(t, WriteSmall(context.Background(), b, c, epoch))
	ba, err := os.ReadFile(a)
	require.NoError(t, err)
	bb, err := os.ReadFile(b)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(ba, bb), "two images of the same contents are byte-identical")
	assert.LessOrEqual(t, int64(len(ba)), int64(MaxElToritoSize))
	assert.Regexp(t, `^FAT1[26] {3}$`, string(ba[54:62]), "the boot sector says FAT12 or FAT16, not FAT32")
	listing := fsckList(t, a)
	for name := range c.Files() {
		assert.Contains(t, strings.ToUpper(listing), strings.ToUpper("/"+name), "fsck.fat lists %s", name)
	}
	assert.Contains(t, listing, "terrarium-install.conf")
}

func fsckList(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command("fsck.fat", "-n", "-l", img).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}
