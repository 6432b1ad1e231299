package slotindex

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib/terrarium", "etc"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin/kubelet"), []byte("test"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/a file\nwith a newline"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/lib/terrarium/slot-index"), []byte("old"), 0o644))
	require.NoError(t, os.Symlink("../usr/share/zoneinfo/Etc/UTC", filepath.Join(root, "etc/localtime")))
	require.NoError(t, os.Chmod(filepath.Join(root, "usr/bin"), os.ModeSticky|0o755))
	return root
}

func TestBuildWriteParse(t *testing.T) {
	root := tree(t)
	ix, err := Build(context.Background(), root, "/usr/lib/terrarium/slot-index")
	require.NoError(t, err)
	var paths []string
	for _, e := range ix.Entries {
		paths = append(paths, e.Path)
	}
	assert.Equal(t, []string{"/", "/etc", "/etc/a file\nwith a newline", "/etc/localtime", "/usr", "/usr/bin", "/usr/bin/kubelet", "/usr/lib", "/usr/lib/terrarium"}, paths)
	byPath := map[string]Entry{}
	for _, e := range ix.Entries {
		byPath[e.Path] = e
	}
	kubelet := byPath["/usr/bin/kubelet"]
	assert.Equal(t, File, kubelet.Kind)
	assert.Equal(t, uint32(0o755), kubelet.Mode)
	assert.Equal(t, int64(4), kubelet.Size)
	assert.Equal(t, sum, kubelet.SHA256)
	assert.Equal(t, uint32(os.Getuid()), kubelet.UID)
	assert.Equal(t, Link, byPath["/etc/localtime"].Kind)
	assert.Equal(t, "../usr/share/zoneinfo/Etc/UTC", byPath["/etc/localtime"].Target)
	assert.Equal(t, uint32(0o1755), byPath["/usr/bin"].Mode)
	assert.Equal(t, Dir, byPath["/usr/bin"].Kind)

	var buf bytes.Buffer
	n, err := ix.WriteTo(&buf)
	require.NoError(t, err)
	assert.Equal(t, int64(buf.Len()), n)
	text := buf.String()
	assert.True(t, strings.HasPrefix(text, Header+"\n"))
	assert.Contains(t, text, "f 0755 ")
	assert.Contains(t, text, " 4 "+sum+` "/usr/bin/kubelet"`+"\n")
	assert.Contains(t, text, `"/etc/localtime" "../usr/share/zoneinfo/Etc/UTC"`+"\n")

	back, err := Parse(strings.NewReader(text), "slot-index")
	require.NoError(t, err)
	assert.Equal(t, ix, back)
	assert.Empty(t, Diff(ix, back))
}

func TestDiff(t *testing.T) {
	f := func(p, sum string) Entry {
		return Entry{Path: p, Kind: File, Mode: 0o755, Size: 4, SHA256: sum}
	}
	old := &Index{Entries: []Entry{
		{Path: "/", Kind: Dir, Mode: 0o755},
		f("/a", sum), f("/gone", sum), f("/kubelet", sum), f("/z", sum),
	}}
	changed := f("/kubelet", strings.Repeat("0", 64))
	chmod := f("/z", sum)
	chmod.Mode = 0o4755
	added := f("/new", sum)
	next := &Index{Entries: []Entry{
		{Path: "/", Kind: Dir, Mode: 0o755},
		f("/a", sum), changed, added, chmod,
	}}
	d := Diff(old, next)
	require.Len(t, d, 4)
	assert.Equal(t, Change{Path: "/gone", Old: &old.Entries[2]}, d[0])
	assert.Equal(t, Change{Path: "/kubelet", Old: &old.Entries[3], New: &next.Entries[2]}, d[1])
	assert.Equal(t, Change{Path: "/new", New: &next.Entries[3]}, d[2])
	assert.Equal(t, "/z", d[3].Path)
	assert.Len(t, Diff(&Index{}, next), 5)
	assert.Len(t, Diff(old, &Index{}), 5)
	assert.Empty(t, Diff(&Index{}, &Index{}))
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "empty, not a slot index"},
		{"header", "terrarium-slot-index v2\n", `slot-index:1: "terrarium-slot-index v2" is not`},
		{"fields", Header + "\nf 0755 0 0 4\n", "slot-index:2: "},
		{"kind", Header + "\nx 0755 0 0 - - \"/a\"\n", `kind "x" is none of`},
		{"mode", Header + "\nd 0799 0 0 - - \"/a\"\n", "mode \"0799\" is not octal"},
		{"mode too big", Header + "\nd 17777 0 0 - - \"/a\"\n", "is not octal permission bits"},
		{"uid", Header + "\nd 0755 root 0 - - \"/a\"\n", `uid "root" is not a numeric id`},
		{"size", Header + "\nf 0755 0 0 -1 " + sum + " \"/a\"\n", `size "-1"`},
		{"sum", Header + "\nf 0755 0 0 4 " + strings.ToUpper(sum) + " \"/a\"\n", "not 64 lowercase hex"},
		{"dir with a sum", Header + "\nd 0755 0 0 4 " + sum + " \"/a\"\n", "want - and -"},
		{"unquoted", Header + "\nd 0755 0 0 - - /a\n", "is not a quoted string"},
		{"relative", Header + "\nd 0755 0 0 - - \"a\"\n", "not absolute and clean"},
		{"unclean", Header + "\nd 0755 0 0 - - \"/a/../b\"\n", "not absolute and clean"},
		{"link without target", Header + "\nl 0777 0 0 - - \"/a\"\n", `link "/a" has no target`},
		{"trailing", Header + "\nd 0755 0 0 - - \"/a\" x\n", "follows the last field"},
		{"unsorted", Header + "\nd 0755 0 0 - - \"/b\"\nd 0755 0 0 - - \"/a\"\n", `slot-index:3: "/a" comes after "/b"`},
		{"twice", Header + "\nd 0755 0 0 - - \"/a\"\nd 0755 0 0 - - \"/a\"\n", "named twice"},
		{"long line", Header + "\nd 0755 0 0 - - \"/" + strings.Repeat("a", maxLine) + "\"\n", "token too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := Parse(strings.NewReader(tc.text), "slot-index")
			require.Error(t, err)
			assert.Nil(t, ix)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "slot-index"), "names the file: %v", err)
		})
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "slot-index")
	_, err := Load(p)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.WriteFile(p, []byte(Header+"\nd 0755 0 0 - - \"/\"\n"), 0o644))
	ix, err := Load(p)
	require.NoError(t, err)
	assert.Equal(t, []Entry{{Path: "/", Kind: Dir, Mode: 0o755}}, ix.Entries)
}

func TestBuildStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Build(ctx, tree(t), "")
	require.ErrorIs(t, err, context.Canceled)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(Header + "\nd 0755 0 0 - - \"/\"\nf 0644 0 0 4 " + sum + " \"/a\"\nl 0777 0 0 - - \"/b\" \"a\"\n"))
	f.Add([]byte(Header + "\no 0600 1 2 - - \"/dev\\x00\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := Parse(bytes.NewReader(data), "fuzz")
		if err != nil {
			if ix != nil {
				t.Fatalf("Parse failed (%v) but returned an index", err)
			}
			return
		}
		var buf bytes.Buffer
		if _, err := ix.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(&buf, "again")
		if err != nil {
			t.Fatalf("Parse(WriteTo()) failed: %v\n%s", err, buf.String())
		}
		if len(Diff(ix, again)) != 0 {
			t.Fatalf("round trip changed the index:\n%s", buf.String())
		}
	})
}
