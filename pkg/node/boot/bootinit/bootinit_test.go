package bootinit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
)

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"   \n", map[string]string{}},
		{
			"BOOT_IMAGE=/terrarium/a/vmlinuz root=PARTLABEL=TERRA-A ro quiet terrarium.slot=b console=ttyS0,115200 console=tty0\n",
			map[string]string{
				"BOOT_IMAGE":     "/terrarium/a/vmlinuz",
				"root":           "PARTLABEL=TERRA-A", // only the first '=' splits
				"ro":             "",
				"quiet":          "",
				"terrarium.slot": "b",
				"console":        "tty0", // the last one wins
			},
		},
		{"terrarium.rescue\tterrarium.reset-state", map[string]string{"terrarium.rescue": "", "terrarium.reset-state": ""}},
		{"empty= x", map[string]string{"empty": "", "x": ""}},
	}
	for _, tc := range tests {
		if got := parseCmdline(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseCmdline(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	// Flags without a value are present, which is how Run tests them.
	c := parseCmdline("quiet " + layout.CmdlineRescue)
	if _, ok := c[layout.CmdlineRescue]; !ok {
		t.Errorf("%s not present in %v", layout.CmdlineRescue, c)
	}
	if _, ok := c[layout.CmdlineResetState]; ok {
		t.Errorf("%s present in %v", layout.CmdlineResetState, c)
	}
}

func TestSlot(t *testing.T) {
	for cmdline, want := range map[string]layout.Slot{
		"":                  layout.SlotA,
		"quiet":             layout.SlotA,
		"terrarium.slot=a":  layout.SlotA,
		"terrarium.slot=b":  layout.SlotB,
		"terrarium.slot=c":  layout.SlotA,
		"terrarium.slot=":   layout.SlotA,
		"terrarium.slot=B":  layout.SlotA,
		"terrarium.slot=bb": layout.SlotA,
	} {
		in := &Init{cmdline: parseCmdline(cmdline)}
		if got := in.slot(); got != want {
			t.Errorf("slot() with %q = %q, want %q", cmdline, got, want)
		}
	}
	if got := (&Init{}).slot(); got != layout.SlotA {
		t.Errorf("slot() without a command line = %q, want a", got)
	}
}

func TestNew(t *testing.T) {
	var buf bytes.Buffer
	in := New(&buf)
	if in.sysroot != "/sysroot" || in.partitionTimeout <= 0 {
		t.Errorf("New() = %+v", in)
	}
	in.say("hello %d", 42)
	if got := buf.String(); got != "terrarium-init: hello 42\n" {
		t.Errorf("say wrote %q", got)
	}
}

// fakeSysfs builds a sys/ tree like the kernel's: /sys/class/block holds
// one symlink per block device into /sys/devices, partitions below their
// disk, each with a uevent file.
type fakeSysfs struct {
	t    *testing.T
	root string
}

func newFakeSysfs(t *testing.T) *fakeSysfs {
	f := &fakeSysfs{t: t, root: t.TempDir()}
	if err := os.MkdirAll(f.classBlock(), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeSysfs) classBlock() string { return filepath.Join(f.root, "sys", "class", "block") }

// add creates the device at devPath (relative to /sys/devices) with the
// given uevent, and its /sys/class/block link.
func (f *fakeSysfs) add(devPath, uevent string) {
	f.t.Helper()
	dir := filepath.Join(f.root, "sys", "devices", devPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uevent"), []byte(uevent), 0o644); err != nil {
		f.t.Fatal(err)
	}
	link := filepath.Join(f.classBlock(), filepath.Base(devPath))
	if err := os.Symlink(filepath.Join("..", "..", "devices", devPath), link); err != nil {
		f.t.Fatal(err)
	}
}

func diskUevent(name string) string {
	return "MAJOR=253\nMINOR=0\nDEVNAME=" + name + "\nDEVTYPE=disk\nDISKSEQ=1\n"
}

func partUevent(name string, n int, label string) string {
	s := "MAJOR=253\nMINOR=1\nDEVNAME=" + name + "\nDEVTYPE=partition\nDISKSEQ=1\nPARTN=" + string(rune('0'+n)) + "\n"
	if label != "" {
		s += "PARTNAME=" + label + "\n"
	}
	return s
}

func TestScanPartitions(t *testing.T) {
	fs := newFakeSysfs(t)
	const virtio = "pci0000:00/0000:00:04.0/virtio1/block/vda"
	fs.add(virtio, diskUevent("vda"))
	fs.add(virtio+"/vda1", partUevent("vda1", 1, layout.LabelESP))
	fs.add(virtio+"/vda2", partUevent("vda2", 2, layout.LabelSlotA))
	fs.add(virtio+"/vda3", partUevent("vda3", 3, layout.LabelSlotB))
	fs.add(virtio+"/vda4", partUevent("vda4", 4, layout.LabelState))
	const nvme = "pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1"
	fs.add(nvme, diskUevent("nvme0n1"))
	fs.add(nvme+"/nvme0n1p1", partUevent("nvme0n1p1", 1, layout.LabelESP))
	fs.add(nvme+"/nvme0n1p2", partUevent("nvme0n1p2", 2, "TERRA-A"))
	// An MBR partition has no PARTNAME, a CD-ROM no partitions at all.
	const usb = "pci0000:00/0000:00:06.0/usb1/1-1/host0/target0:0:0/0:0:0:0/block/sdb"
	fs.add(usb, diskUevent("sdb"))
	fs.add(usb+"/sdb1", partUevent("sdb1", 1, ""))
	fs.add("pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0/block/sr0", diskUevent("sr0"))
	// Loop devices live under /sys/devices/virtual.
	fs.add("virtual/block/loop0", diskUevent("loop0"))
	// Something without a uevent file, and a partition-looking entry that is
	// not a symlink, are skipped.
	if err := os.Mkdir(filepath.Join(fs.classBlock(), "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	notLink := filepath.Join(fs.classBlock(), "notlink1")
	if err := os.Mkdir(notLink, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notLink, "uevent"), []byte(partUevent("notlink1", 1, "X")), 0o644); err != nil {
		t.Fatal(err)
	}

	disks, err := scanPartitions(fs.classBlock())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*diskInfo{
		"vda": {name: "vda", parts: map[string]string{
			layout.LabelESP: "vda1", layout.LabelSlotA: "vda2", layout.LabelSlotB: "vda3", layout.LabelState: "vda4",
		}},
		"nvme0n1": {name: "nvme0n1", parts: map[string]string{layout.LabelESP: "nvme0n1p1", layout.LabelSlotA: "nvme0n1p2"}},
	}
	if !reflect.DeepEqual(disks, want) {
		for k, v := range disks {
			t.Logf("got %s: %+v", k, *v)
		}
		t.Errorf("scanPartitions: got %d disks, want %v", len(disks), want)
	}

	d := disks["vda"]
	if got := d.dev(); got != "/dev/vda" {
		t.Errorf("dev() = %q", got)
	}
	if got, ok := d.partDev(layout.LabelState); !ok || got != "/dev/vda4" {
		t.Errorf("partDev(STATE) = %q, %v", got, ok)
	}
	if _, ok := disks["nvme0n1"].partDev(layout.LabelState); ok {
		t.Error("partDev finds a STATE the nvme disk does not have")
	}
}

func TestScanPartitionsEmptyAndMissing(t *testing.T) {
	fs := newFakeSysfs(t)
	disks, err := scanPartitions(fs.classBlock())
	if err != nil || len(disks) != 0 {
		t.Errorf("scanPartitions(empty) = %v, %v", disks, err)
	}
	if _, err := scanPartitions(filepath.Join(fs.root, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("scanPartitions(missing) error = %v, want not-exist", err)
	}
}

func TestMarkBlock(t *testing.T) {
	b := layout.StateMarkBlock()
	if len(b) != 4096 {
		t.Errorf("len(layout.StateMarkBlock()) = %d, want 4096", len(b))
	}
	if !bytes.HasPrefix(b, []byte(layout.StateUnformattedMagic)) {
		t.Errorf("layout.StateMarkBlock() does not start with the magic: %q", b[:32])
	}
	if rest := b[len(layout.StateUnformattedMagic):]; !bytes.Equal(rest, make([]byte, len(rest))) {
		t.Error("layout.StateMarkBlock() is not zero after the magic")
	}
	// It must cover the ext4 superblock magic, so that an old filesystem
	// on the new area does not survive the mark.
	if b[1080] != 0 || b[1081] != 0 {
		t.Error("layout.StateMarkBlock() has an ext4 magic")
	}
	layout.StateMarkBlock()[0] = 'X'
	if layout.StateMarkBlock()[0] != 'T' {
		t.Error("layout.StateMarkBlock() shares its buffer between calls")
	}
}

func writeDev(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStateKind(t *testing.T) {
	ext4 := make([]byte, 1<<20)
	ext4[1080], ext4[1081] = 0x53, 0xEF

	marked := make([]byte, 1<<20)
	copy(marked, layout.StateMarkBlock())

	// An ext4 filesystem written over a marked partition is ext4.
	both := make([]byte, 1<<20)
	copy(both, layout.StateMarkBlock())
	both[1080], both[1081] = 0x53, 0xEF

	// The magic's bytes in the wrong order, or only a prefix of the
	// unformatted magic, are not recognised.
	swapped := make([]byte, 4096)
	swapped[1080], swapped[1081] = 0xEF, 0x53
	prefix := make([]byte, 4096)
	copy(prefix, layout.StateUnformattedMagic[:10])

	random := bytes.Repeat([]byte{0xA5, 0x5A}, 2048)

	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"ext4":          {ext4, "ext4"},
		"new":           {marked, "new"},
		"mark only":     {layout.StateMarkBlock(), "new"},
		"ext4 over new": {both, "ext4"},
		"zeros":         {make([]byte, 1<<20), "unknown"},
		"swapped magic": {swapped, "unknown"},
		"magic prefix":  {prefix, "unknown"},
		"random":        {random, "unknown"},
		"exactly 2048":  {ext4[:2048], "ext4"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := stateKind(writeDev(t, tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("stateKind = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStateKindErrors(t *testing.T) {
	if _, err := stateKind(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stateKind(missing) error = %v", err)
	}
	short := writeDev(t, make([]byte, 100))
	_, err := stateKind(short)
	if err == nil || !strings.Contains(err.Error(), short) {
		t.Errorf("stateKind(short) error = %v, want one naming %s", err, short)
	}
}

func TestLayoutStateExistingVar(t *testing.T) {
	sysroot := t.TempDir()
	mnt := filepath.Join(sysroot, layout.StateMount)
	if err := os.MkdirAll(filepath.Join(mnt, layout.StateVarDir), 0o755); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	in := &Init{console: &console, sysroot: sysroot, cmdline: parseCmdline("terrarium.slot=b")}

	// Not fresh: directories are made, no marker is written.
	if err := in.layoutState(context.Background(), mnt, false); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{layout.StateEtcUpper, layout.StateEtcWork, layout.StateTerrarium} {
		if fi, err := os.Stat(filepath.Join(mnt, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
	marker := filepath.Join(mnt, layout.StateMarkerFile)
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker written for an existing STATE: %v", err)
	}

	// Fresh: the marker records the slot.
	if err := in.layoutState(context.Background(), mnt, true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "created=") || !strings.HasSuffix(string(b), " slot=b\n") {
		t.Errorf("marker = %q", b)
	}
	if strings.Contains(console.String(), "seeding") {
		t.Errorf("seeded /var although it exists: %q", console.String())
	}
}

func TestEnsureStatePartitionExisting(t *testing.T) {
	var console bytes.Buffer
	in := &Init{console: &console}
	disk := &diskInfo{name: "vda", parts: map[string]string{layout.LabelESP: "vda1", layout.LabelState: "vda4"}}
	// An existing TERRA-STATE is never touched: the disk is not even opened.
	if err := in.ensureStatePartition(context.Background(), disk); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(console.String(), "TERRA-STATE found on /dev/vda4") {
		t.Errorf("console = %q", console.String())
	}
}

// devRelative names path as a partition, as partDev prefixes "/dev/".
func devRelative(t *testing.T, path string) string {
	t.Helper()
	rel, err := filepath.Rel("/dev", path)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

func TestEnsureStateFSRefusesForeignData(t *testing.T) {
	// A STATE partition holding something else is never formatted without
	// an explicit reset; the check happens before anything is mounted.
	dev := writeDev(t, bytes.Repeat([]byte{0xA5}, 4096))
	var console bytes.Buffer
	in := &Init{console: &console, sysroot: t.TempDir(), cmdline: parseCmdline("terrarium.slot=a")}
	disk := &diskInfo{name: "vda", parts: map[string]string{layout.LabelState: devRelative(t, dev)}}
	err := in.ensureStateFS(context.Background(), disk)
	if err == nil {
		t.Fatal("ensureStateFS accepted a partition of unknown content")
	}
	for _, want := range []string{"refusing to format", layout.CmdlineResetState} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if b, _ := os.ReadFile(dev); !bytes.Equal(b, bytes.Repeat([]byte{0xA5}, 4096)) {
		t.Error("the partition was changed")
	}
}

func TestEnsureStateFSMissingDevice(t *testing.T) {
	in := &Init{console: &bytes.Buffer{}, sysroot: t.TempDir(), cmdline: map[string]string{}}
	disk := &diskInfo{name: "vda", parts: map[string]string{layout.LabelState: devRelative(t, filepath.Join(t.TempDir(), "missing"))}}
	if err := in.ensureStateFS(context.Background(), disk); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ensureStateFS(missing) = %v, want not-exist", err)
	}
}

// The initramfs finds `firstboot reset`'s request where the on-disk
// contract puts it, on the STATE it has mounted.
func TestResetRequested(t *testing.T) {
	mnt := t.TempDir()
	_, ok := nodestate.At(mnt).ResetRequested()
	assert.False(t, ok)
	p := filepath.Join(mnt, layout.StateResetRequest)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte("requested at 2026-11-26T02:00:00Z\n"), 0o644))
	at, ok := nodestate.At(mnt).ResetRequested()
	assert.True(t, ok)
	assert.Equal(t, "requested at 2026-11-26T02:00:00Z", at)
}

// A step that fails on a trial boot reboots (so the boot loader counts the
// try) only when a reboot can boot something with tries left; otherwise,
// or when that cannot be told, the rescue shell follows.
func TestRebootIfOnTrial(t *testing.T) {
	for _, tc := range []struct {
		name     string
		helps    bool
		err      error
		rebooted bool
		says     string
	}{
		{"on trial", true, nil, true, "slot b failed on a trial boot: rebooting in 0s"},
		{"nothing to fall back to", false, nil, false, ""},
		{"the ESP unreadable", false, errors.New("mount ESP: no such device"), false, "cannot tell whether slot b is on trial: mount ESP: no such device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var console bytes.Buffer
			rebooted := false
			in := &Init{console: &console, cmdline: map[string]string{layout.CmdlineSlot: "b"},
				trial:  func(context.Context) (bool, error) { return tc.helps, tc.err },
				reboot: func() error { rebooted = true; return nil },
			}
			in.rebootIfOnTrial(context.Background())
			assert.Equal(t, tc.rebooted, rebooted)
			if tc.says != "" {
				assert.Contains(t, console.String(), tc.says)
			} else {
				assert.Empty(t, console.String())
			}
		})
	}
	// Before the boot disk is known, nothing is asked.
	in := &Init{console: io.Discard}
	in.rebootIfOnTrial(context.Background())
}

// An upgrade's trial boot tells the booted system which slot it falls back
// to; any other boot, or one whose ESP cannot be read, writes nothing.
func TestMarkUpgradeTrial(t *testing.T) {
	for _, tc := range []struct {
		name   string
		trial  bool
		err    error
		marker string
		says   string
	}{
		{"an upgrade's trial", true, nil, "a\n", "slot b is on trial over slot a"},
		{"not on trial", false, nil, "", ""},
		{"the ESP unreadable", false, errors.New("mount ESP: no such device"), "", "cannot tell whether slot b is an upgrade's trial (mount ESP: no such device)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var console bytes.Buffer
			marker := filepath.Join(t.TempDir(), "run", "terrarium", "trial-boot")
			in := &Init{console: &console, cmdline: map[string]string{layout.CmdlineSlot: "b"}, trialMarker: marker,
				upgradeTrial: func(context.Context) (bool, error) { return tc.trial, tc.err },
			}
			require.NoError(t, in.markUpgradeTrial(context.Background()), "the boot goes on")
			if tc.marker == "" {
				assert.NoFileExists(t, marker)
			} else {
				b, err := os.ReadFile(marker)
				require.NoError(t, err)
				assert.Equal(t, tc.marker, string(b))
			}
			if tc.says == "" {
				assert.Empty(t, console.String())
			} else {
				assert.Contains(t, console.String(), tc.says)
			}
		})
	}
	// A live boot (no disk) asks nothing.
	require.NoError(t, (&Init{console: io.Discard}).markUpgradeTrial(context.Background()))
}
