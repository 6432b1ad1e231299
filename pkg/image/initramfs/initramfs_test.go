package initramfs

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/u-root/u-root/pkg/cpio"
	"github.com/ulikunitz/xz"
)

// moduleTree is a fake /usr/lib/modules/<version>:
//
//	a -> b -> c, a -> c (diamond), b is xz-compressed
//	virtio-blk (file name with a dash) -> c
//	d -> ghost (ghost is not in modules.dep)
//	crc32c is built in
type moduleTree struct {
	dir     string
	content map[string][]byte // module name -> uncompressed ELF
}

const modulesDep = `kernel/drivers/a.ko: kernel/drivers/b.ko.xz kernel/lib/c.ko
kernel/drivers/b.ko.xz: kernel/lib/c.ko

kernel/lib/c.ko:
kernel/drivers/block/virtio-blk.ko: kernel/lib/c.ko
kernel/drivers/d.ko: kernel/drivers/ghost.ko
`

const modulesBuiltin = `kernel/lib/crc32c.ko
`

func writeModuleTree(t *testing.T) moduleTree {
	t.Helper()
	dir := t.TempDir()
	mt := moduleTree{dir: dir, content: map[string][]byte{}}
	write := func(rel string, data []byte) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modules.dep", []byte(modulesDep))
	write("modules.builtin", []byte(modulesBuiltin))
	for name, rel := range map[string]string{
		"a":          "kernel/drivers/a.ko",
		"c":          "kernel/lib/c.ko",
		"virtio_blk": "kernel/drivers/block/virtio-blk.ko",
		"d":          "kernel/drivers/d.ko",
	} {
		elf := []byte("\x7fELF fake module " + name + "\n")
		mt.content[name] = elf
		write(rel, elf)
	}
	// b is xz-compressed, as Debian ships modules; make it big enough that
	// compression matters.
	elfB := bytes.Repeat([]byte("\x7fELF fake module b, compressed\n"), 1000)
	var xzb bytes.Buffer
	zw, err := xz.NewWriter(&xzb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(elfB); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(xzb.Bytes(), elfB) || xzb.Len() >= len(elfB) {
		t.Fatal("test bug: b.ko.xz is not compressed")
	}
	mt.content["b"] = elfB
	write("kernel/drivers/b.ko.xz", xzb.Bytes())
	return mt
}

func TestModuleName(t *testing.T) {
	tests := map[string]string{
		"kernel/drivers/block/virtio-blk.ko":    "virtio_blk",
		"kernel/drivers/block/virtio_blk.ko.xz": "virtio_blk",
		"virtio-blk":                            "virtio_blk",
		"ext4":                                  "ext4",
		"kernel/fs/ext4/ext4.ko.zst":            "ext4",
		"nls_cp437.ko":                          "nls_cp437",
	}
	for in, want := range tests {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadOrder(t *testing.T) {
	mt := writeModuleTree(t)
	idx, err := readModuleIndex(mt.dir)
	if err != nil {
		t.Fatalf("readModuleIndex: %v", err)
	}
	tests := []struct {
		name string
		want []string
		ok   []string
		// errParts must all appear in the error; nil means no error.
		errParts []string
	}{
		{name: "chain", want: []string{"a"}, ok: []string{"c", "b", "a"}},
		{name: "middle of chain", want: []string{"b"}, ok: []string{"c", "b"}},
		{name: "leaf", want: []string{"c"}, ok: []string{"c"}},
		{name: "shared dependency once", want: []string{"a", "virtio_blk"}, ok: []string{"c", "b", "a", "virtio_blk"}},
		{name: "dependency asked first", want: []string{"c", "a"}, ok: []string{"c", "b", "a"}},
		{name: "duplicates", want: []string{"a", "a", "b"}, ok: []string{"c", "b", "a"}},
		{name: "dash and file name", want: []string{"virtio-blk"}, ok: []string{"c", "virtio_blk"}},
		{name: "builtin skipped", want: []string{"crc32c", "c"}, ok: []string{"c"}},
		{name: "only builtin", want: []string{"crc32c"}, ok: nil},
		{name: "nothing", want: nil, ok: nil},
		{name: "unknown module", want: []string{"nope"}, errParts: []string{`"nope"`, "chain nope"}},
		{name: "unknown dependency", want: []string{"c", "d"}, errParts: []string{`"ghost"`, "chain d -> ghost"}},
		{name: "typo after good", want: []string{"a", "ext5"}, errParts: []string{`"ext5"`, "chain ext5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := idx.loadOrder(tt.want)
			if tt.errParts != nil {
				if err == nil {
					t.Fatalf("loadOrder(%v) = %v, want an error", tt.want, got)
				}
				for _, p := range tt.errParts {
					if !strings.Contains(err.Error(), p) {
						t.Errorf("error %q does not contain %q", err, p)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("loadOrder(%v): %v", tt.want, err)
			}
			if !reflect.DeepEqual(got, tt.ok) {
				t.Errorf("loadOrder(%v) = %v, want %v", tt.want, got, tt.ok)
			}
		})
	}
}

func TestLoadOrderDeepChainMessage(t *testing.T) {
	dir := t.TempDir()
	dep := "x.ko: y.ko z.ko\ny.ko: z.ko\nz.ko: missing.ko\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	idx, err := readModuleIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = idx.loadOrder([]string{"x"})
	if err == nil || !strings.Contains(err.Error(), "(chain x -> y -> z -> missing)") {
		t.Errorf("error = %v, want it to name the chain x -> y -> z -> missing", err)
	}
}

func TestReadModuleIndexMissingFiles(t *testing.T) {
	for _, missing := range []string{"modules.dep", "modules.builtin"} {
		t.Run(missing, func(t *testing.T) {
			mt := writeModuleTree(t)
			if err := os.Remove(filepath.Join(mt.dir, missing)); err != nil {
				t.Fatal(err)
			}
			if _, err := readModuleIndex(mt.dir); err == nil || !strings.Contains(err.Error(), missing) {
				t.Errorf("readModuleIndex without %s: error %v, want one naming it", missing, err)
			}
		})
	}
}

// inputs returns Inputs over a fake module tree with small fake binaries.
func inputs(t *testing.T, mt moduleTree, modules ...string) Inputs {
	t.Helper()
	dir := t.TempDir()
	init := filepath.Join(dir, "init")
	bb := filepath.Join(dir, "busybox")
	if err := os.WriteFile(init, []byte("\x7fELF fake init"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bb, []byte("\x7fELF fake busybox"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Inputs{Init: init, Busybox: bb, ModulesDir: mt.dir, Modules: modules}
}

// readArchive gunzips and parses a newc cpio, returning records by name
// (in order) and their contents.
func readArchive(t *testing.T, data []byte) ([]cpio.Record, map[string][]byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("read cpio: %v", err)
	}
	contents := map[string][]byte{}
	for _, r := range recs {
		if _, dup := contents[r.Name]; dup {
			t.Errorf("record %s appears twice", r.Name)
		}
		b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
		if err != nil {
			t.Fatalf("read %s: %v", r.Name, err)
		}
		contents[r.Name] = b
	}
	return recs, contents
}

func TestWrite(t *testing.T) {
	mt := writeModuleTree(t)
	in := inputs(t, mt, "a", "virtio-blk", "crc32c")
	var buf bytes.Buffer
	if err := Write(&buf, in); err != nil {
		t.Fatalf("Write: %v", err)
	}
	recs, contents := readArchive(t, buf.Bytes())
	byName := map[string]cpio.Record{}
	var names []string
	for _, r := range recs {
		byName[r.Name] = r
		names = append(names, r.Name)
	}

	type want struct {
		mode    uint64
		content []byte // nil: not checked
	}
	wantRecs := map[string]want{
		"init":                      {cpio.S_IFREG | 0o755, []byte("\x7fELF fake init")},
		"bin":                       {cpio.S_IFDIR | 0o755, nil},
		"bin/busybox":               {cpio.S_IFREG | 0o755, []byte("\x7fELF fake busybox")},
		"bin/sh":                    {cpio.S_IFLNK | 0o777, []byte("busybox")},
		"dev":                       {cpio.S_IFDIR | 0o755, nil},
		"dev/console":               {cpio.S_IFCHR | 0o600, nil},
		"dev/null":                  {cpio.S_IFCHR | 0o666, nil},
		"lib/modules":               {cpio.S_IFDIR | 0o755, nil},
		"lib/modules/a.ko":          {cpio.S_IFREG | 0o644, mt.content["a"]},
		"lib/modules/b.ko":          {cpio.S_IFREG | 0o644, mt.content["b"]},
		"lib/modules/c.ko":          {cpio.S_IFREG | 0o644, mt.content["c"]},
		"lib/modules/virtio_blk.ko": {cpio.S_IFREG | 0o644, mt.content["virtio_blk"]},
		"lib/modules/load.order":    {cpio.S_IFREG | 0o644, []byte("c\nb\na\nvirtio_blk\n")},
		"proc":                      {cpio.S_IFDIR | 0o755, nil},
		"sys":                       {cpio.S_IFDIR | 0o755, nil},
		"sysroot":                   {cpio.S_IFDIR | 0o755, nil},
		"run":                       {cpio.S_IFDIR | 0o755, nil},
		"etc":                       {cpio.S_IFDIR | 0o755, nil},
		"lib":                       {cpio.S_IFDIR | 0o755, nil},
		"tmp":                       {cpio.S_IFDIR | 0o1777, nil},
	}
	for name, w := range wantRecs {
		t.Run(name, func(t *testing.T) {
			r, ok := byName[name]
			if !ok {
				t.Fatalf("archive has no %s; it has %v", name, names)
			}
			if r.Mode != w.mode {
				t.Errorf("mode %#o, want %#o", r.Mode, w.mode)
			}
			if w.content != nil && !bytes.Equal(contents[name], w.content) {
				t.Errorf("content %q (%d bytes), want %d bytes", truncate(contents[name]), len(contents[name]), len(w.content))
			}
			if r.UID != 0 || r.GID != 0 || r.MTime != 0 {
				t.Errorf("uid %d gid %d mtime %d, want all 0 (reproducible)", r.UID, r.GID, r.MTime)
			}
		})
	}
	if c := byName["dev/console"]; c.Rmajor != 5 || c.Rminor != 1 {
		t.Errorf("dev/console is %d:%d, want 5:1", c.Rmajor, c.Rminor)
	}
	if c := byName["dev/null"]; c.Rmajor != 1 || c.Rminor != 3 {
		t.Errorf("dev/null is %d:%d, want 1:3", c.Rmajor, c.Rminor)
	}
	// Nothing else: no builtin, no module not asked for, no trailer record.
	for _, n := range names {
		if _, ok := wantRecs[n]; !ok {
			t.Errorf("unexpected record %s", n)
		}
	}
	// Records are sorted, so every directory comes before what it holds.
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("records not sorted: %s before %s", names[i-1], names[i])
		}
	}
	seen := map[string]bool{}
	for _, n := range names {
		if d := filepath.Dir(n); d != "." && !seen[d] {
			t.Errorf("%s comes before its directory %s", n, d)
		}
		seen[n] = true
	}
}

func TestWriteReproducible(t *testing.T) {
	mt := writeModuleTree(t)
	in := inputs(t, mt, "a", "virtio_blk", "crc32c")
	var first, second bytes.Buffer
	if err := Write(&first, in); err != nil {
		t.Fatalf("Write: %v", err)
	}
	// Touch every input: times must not leak into the archive.
	for _, p := range []string{in.Init, in.Busybox, filepath.Join(mt.dir, "kernel/drivers/a.ko")} {
		if err := os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Write(&second, in); err != nil {
		t.Fatalf("second Write: %v", err)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Errorf("two Writes differ (%d vs %d bytes)", first.Len(), second.Len())
	}
	// A different input gives a different archive (the comparison can fail).
	if err := os.WriteFile(in.Busybox, []byte("other busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	var third bytes.Buffer
	if err := Write(&third, in); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.Bytes(), third.Bytes()) {
		t.Error("changing busybox did not change the archive")
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, mt moduleTree, in *Inputs)
		errPart string
	}{
		{"unknown module", func(t *testing.T, mt moduleTree, in *Inputs) { in.Modules = []string{"a", "nope"} }, `"nope"`},
		{"missing init", func(t *testing.T, mt moduleTree, in *Inputs) { in.Init = filepath.Join(mt.dir, "no-init") }, "no-init"},
		{"missing busybox", func(t *testing.T, mt moduleTree, in *Inputs) { in.Busybox = filepath.Join(mt.dir, "no-bb") }, "no-bb"},
		{"missing module file", func(t *testing.T, mt moduleTree, in *Inputs) {
			if err := os.Remove(filepath.Join(mt.dir, "kernel/lib/c.ko")); err != nil {
				t.Fatal(err)
			}
		}, "c.ko"},
		{"corrupt xz", func(t *testing.T, mt moduleTree, in *Inputs) {
			if err := os.WriteFile(filepath.Join(mt.dir, "kernel/drivers/b.ko.xz"), []byte("not xz"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "decompress"},
		{"no module index", func(t *testing.T, mt moduleTree, in *Inputs) { in.ModulesDir = t.TempDir() }, "modules.dep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mt := writeModuleTree(t)
			in := inputs(t, mt, "a")
			tt.prepare(t, mt, &in)
			var buf bytes.Buffer
			err := Write(&buf, in)
			if err == nil {
				t.Fatal("Write succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.errPart) {
				t.Errorf("error %q does not contain %q", err, tt.errPart)
			}
		})
	}
}

func TestDefaultModules(t *testing.T) {
	mods := DefaultModules()
	seen := map[string]bool{}
	for _, m := range mods {
		if seen[m] {
			t.Errorf("%s listed twice", m)
		}
		seen[m] = true
		if moduleName(m) != m {
			t.Errorf("%s is not a normalized module name", m)
		}
	}
	// vfat mounts with Debian's default iocharset, ascii: without
	// nls_ascii the initramfs cannot read the ESP's boot entries (EINVAL,
	// "FAT-fs (vda1): IO charset ascii not found").
	for _, need := range []string{"virtio_blk", "squashfs", "overlay", "ext4", "vfat", "nls_ascii"} {
		if !seen[need] {
			t.Errorf("DefaultModules lacks %s", need)
		}
	}
	mods[0] = "changed"
	if DefaultModules()[0] == "changed" {
		t.Error("DefaultModules returns a shared slice")
	}
}

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
