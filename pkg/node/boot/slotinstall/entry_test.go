package slotinstall

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/esp"
)

var update = flag.Bool("update", false, "rewrite testdata/build from pkg/image/esp")

// buildContents is an ESP as the build writes it: slot B preferred, boot
// counting on. (Tests may use the build side to make fixtures.)
func buildContents() esp.Contents {
	return esp.Contents{SystemdBoot: "/sd-boot.efi", TimeoutSeconds: 0, Entries: []esp.Entry{
		{Slot: layout.SlotA, Title: "Terrarium 0.2.0 (slot a)", Version: "0.2.0", Kernel: "/k", Initrd: "/i",
			Cmdline: []string{"console=ttyS0", "quiet"}, Tries: 0, SortKey: "terrarium-2"},
		{Slot: layout.SlotB, Title: "Terrarium 0.2.0 (slot b)", Version: "0.2.0", Kernel: "/k", Initrd: "/i",
			Cmdline: []string{"console=ttyS0", "quiet"}, Tries: 3, SortKey: "terrarium-1"},
	}}
}

// goldenFiles are the build's files copied into testdata/build.
var goldenFiles = []string{"loader/loader.conf", "loader/entries/terrarium-b+3.conf"}

// TestGoldenIsTheBuilds checks that testdata/build still holds what the
// build writes; go test -update rewrites it. When it fails, the build
// changed the entry format: change the renderer to match, then update.
// (What both sides need belongs in pkg/contract/layout.)
func TestGoldenIsTheBuilds(t *testing.T) {
	files := buildContents().Files()
	for _, name := range goldenFiles {
		golden := filepath.Join("testdata", "build", filepath.FromSlash(name))
		if *update {
			require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
			require.NoError(t, os.WriteFile(golden, []byte(files[name]), 0o644))
		}
		want, err := os.ReadFile(golden)
		require.NoError(t, err)
		assert.Equal(t, string(want), files[name], "%s: the build writes otherwise; run go test -update and adapt the renderer", name)
	}
}

// TestRenderIsTheBuilds checks that the node writes an entry as the build
// does, but for the comment line that records the rootfs.
func TestRenderIsTheBuilds(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "build", "loader", "entries", "terrarium-b+3.conf"))
	require.NoError(t, err)
	e := newEntry(layout.SlotB, "0.2.0", "terrarium-1", []string{"console=ttyS0", "quiet"}, "")
	assert.Equal(t, string(want), string(e.render()))
	assert.Equal(t, string(want), buildEntry(layout.SlotB, "0.2.0", "terrarium-1"), "the tests' fixture")

	e.rootfsSHA256 = "ab12"
	assert.Equal(t, string(want)+"# rootfs-sha256 ab12\n", string(e.render()))
	assert.Equal(t, e, parseEntry(e.render()), "parse reads what render writes")

	conf, err := os.ReadFile(filepath.Join("testdata", "build", "loader", "loader.conf"))
	require.NoError(t, err)
	assert.NoError(t, checkLoaderDefault(conf), "the build's loader.conf selects both slots")
}

func TestParseEntryName(t *testing.T) {
	tests := []struct {
		file       string
		ok         bool
		slot       layout.Slot
		counted    bool
		left, done int
	}{
		{file: "terrarium-a.conf", ok: true, slot: layout.SlotA},
		{file: "terrarium-b+3.conf", ok: true, slot: layout.SlotB, counted: true, left: 3},
		{file: "terrarium-b+2-1.conf", ok: true, slot: layout.SlotB, counted: true, left: 2, done: 1},
		{file: "terrarium-a+0-3.conf", ok: true, slot: layout.SlotA, counted: true, done: 3},
		{file: "TERRARIUM-A.CONF", ok: true, slot: layout.SlotA},
		{file: "terrarium-c.conf"},
		{file: "terrarium-ab.conf"},
		{file: "terrarium-a+3.conf.new"},
		{file: "terrarium-a+x.conf"},
		{file: "xterrarium-a.conf"},
		{file: "terrarium-a-3.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			n, ok := parseEntryName(tt.file)
			require.Equal(t, tt.ok, ok)
			if !ok {
				return
			}
			assert.Equal(t, entryName{file: tt.file, slot: tt.slot, counted: tt.counted, left: tt.left, done: tt.done}, n)
			assert.Equal(t, tt.counted && tt.left == 0, n.bad())
		})
	}
}

func TestNextSortKey(t *testing.T) {
	tests := []struct {
		running, want string
		err           error
	}{
		{running: "terrarium-1", want: "terrarium-0-999999999"},
		{running: "terrarium-2", want: "terrarium-0-999999999"},
		{running: "", want: "terrarium-0-999999999"},
		{running: "terrarium-0-999999999", want: "terrarium-0-999999998"},
		{running: "terrarium-0-000000001", want: "terrarium-0-000000000"},
		{running: "terrarium-0-000000000", err: ErrBootOrder},
		{running: "terrarium-0-12", err: ErrBootOrder},
		{running: "debian", err: ErrBootOrder},
	}
	for _, tt := range tests {
		t.Run(tt.running, func(t *testing.T) {
			got, err := nextSortKey(tt.running)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			if tt.running != "" {
				assert.Less(t, got, tt.running)
			}
		})
	}
}

func TestSlotCmdline(t *testing.T) {
	tests := []struct {
		name    string
		running []string
		want    []string
	}{
		{"none", nil, []string{}},
		{"the build's", []string{"console=ttyS0", "quiet", "terrarium.slot=a"}, []string{"console=ttyS0", "quiet"}},
		{"one boot's requests", []string{"terrarium.reset-state", "ro", "terrarium.rescue=1", "terrarium.slot=b"}, []string{"ro"}},
		{"similar keys kept", []string{"terrarium.slots=2", "terrarium.slot.x"}, []string{"terrarium.slots=2", "terrarium.slot.x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, slotCmdline(tt.running))
		})
	}
}

func TestCheckLoaderDefault(t *testing.T) {
	tests := []struct {
		name, conf string
		ok         bool
	}{
		{"the build's", "timeout 0\ndefault terrarium-*\n", true},
		{"none", "timeout 3\n", true},
		{"no file", "", true},
		{"upper case", "default TERRARIUM-*\n", true},
		{"any", "default *\n", true},
		{"one slot", "default terrarium-a.conf\n", false},
		{"the last line counts", "default terrarium-*\ndefault terrarium-b*\n", false},
		{"saved", "default @saved\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkLoaderDefault([]byte(tt.conf))
			if tt.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ErrBootOrder)
			}
		})
	}
}
