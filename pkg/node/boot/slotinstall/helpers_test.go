package slotinstall

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/grubenv"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// signingKey is the build's key in these tests.
var signingKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// content returns n deterministic bytes that differ for each seed.
func content(seed string, n int) []byte {
	var out []byte
	sum := sha256.Sum256([]byte(seed))
	for len(out) < n {
		out = append(out, sum[:]...)
		sum = sha256.Sum256(sum[:])
	}
	return out[:n]
}

// build is one build of the image: a version and its slot's parts.
type build struct {
	version                string
	rootfs, kernel, initrd []byte
	// ukis are a Secure Boot build's signed UKIs, by slot (none or both).
	ukis map[layout.Slot][]byte
}

// newBuild returns a build whose parts depend on its version.
func newBuild(version string) build {
	return build{
		version: version,
		rootfs:  content("rootfs "+version, 20_000),
		kernel:  content("kernel "+version, 3_000),
		initrd:  content("initrd "+version, 5_000),
	}
}

// upgradeFile writes b's upgrade file, signed by signingKey.
func (b build) upgradeFile(t testing.TB) []byte {
	t.Helper()
	dir := t.TempDir()
	var parts []upgrade.Part
	for _, p := range []struct {
		name string
		role upgrade.Role
		data []byte
	}{
		{"rootfs.squashfs", upgrade.RoleRootfs, b.rootfs}, {"vmlinuz", upgrade.RoleKernel, b.kernel}, {"initrd.img", upgrade.RoleInitramfs, b.initrd},
		{"terrarium-a.efi", upgrade.RoleUKIA, b.ukis[layout.SlotA]}, {"terrarium-b.efi", upgrade.RoleUKIB, b.ukis[layout.SlotB]},
	} {
		if p.data == nil {
			continue
		}
		file := filepath.Join(dir, p.name)
		require.NoError(t, os.WriteFile(file, p.data, 0o644))
		parts = append(parts, upgrade.FilePart(p.name, p.role, file))
	}
	var buf bytes.Buffer
	_, err := upgrade.Write(context.Background(), &buf, upgrade.Manifest{
		Version: b.version, Compatible: "terrarium", MinFromVersion: "0.1.0", BuiltAt: "2026-01-01T00:00:00Z",
	}, parts, signingKey)
	require.NoError(t, err)
	return buf.Bytes()
}

// verify opens and verifies an upgrade file read through r.
func verify(t testing.TB, r io.ReaderAt, size int64) *upgrade.Verified {
	t.Helper()
	f, err := upgrade.Open(r, size, upgrade.WithName("test.upgrade"))
	require.NoError(t, err)
	v, err := f.Verify(context.Background(), []signature.PublicKey{signature.PublicKeyOf(signingKey)})
	require.NoError(t, err)
	return v
}

// verified returns b's upgrade file, verified.
func (b build) verified(t testing.TB) *upgrade.Verified {
	data := b.upgradeFile(t)
	return verify(t, bytes.NewReader(data), int64(len(data)))
}

// slotSize is the size of the test disks' slot partitions.
const slotSize = 64 << 10

// node is a node's disk in files: the ESP as a directory, the slots'
// partitions as files named by label, and what the node runs.
type node struct {
	t       *testing.T
	esp     string
	devDir  string
	running layout.Slot
	release release.Release
	builds  map[string]build // by version: what a slot or entry may hold
	clock   *fakeClock
	reports *reports
	esps    *dirESP
	// devices, when set, opens the slots' partitions in place of the
	// files in devDir (a stream's tests).
	devices SlotDevices
}

// image returns a node freshly flashed from build b with slot A only, as
// the build writes it (pkg/image/esp), booted and blessed.
func image(t *testing.T, b build) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{
		t: t, esp: filepath.Join(dir, "esp"), devDir: filepath.Join(dir, "dev"),
		running: layout.SlotA, release: release.Release{Name: "terrarium", Version: b.version},
		builds: map[string]build{b.version: b}, clock: &fakeClock{now: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)},
		reports: &reports{},
	}
	n.esps = &dirESP{t: t, dir: n.esp}
	loaderConf, err := os.ReadFile(filepath.Join("testdata", "build", filepath.FromSlash(layout.ESPLoaderConf)))
	require.NoError(t, err)
	n.write(layout.ESPLoaderConf, string(loaderConf))
	grubEnv, err := grubenv.Encode(grubenv.Env{layout.GrubPrefer: string(layout.SlotA)})
	require.NoError(t, err)
	n.write(layout.ESPGrubEnv, string(grubEnv))
	n.write(layout.ESPEntriesDir+"/"+layout.SlotA.EntryFile(0), buildEntry(layout.SlotA, b.version, "terrarium-1"))
	n.write(layout.SlotA.KernelPath(), string(b.kernel))
	n.write(layout.SlotA.InitrdPath(), string(b.initrd))
	require.NoError(t, os.MkdirAll(n.devDir, 0o755))
	for _, slot := range layout.Slots() {
		data := make([]byte, slotSize)
		if slot == layout.SlotA {
			copy(data, b.rootfs)
		}
		require.NoError(t, os.WriteFile(filepath.Join(n.devDir, slot.Label()), data, 0o644))
	}
	return n
}

// withSlotB adds slot B as the build writes it in slot copy mode: the same
// build, its entry counted with tries and sorted after A's.
func (n *node) withSlotB(tries int) *node {
	b := n.builds[n.release.Version]
	n.write(layout.ESPEntriesDir+"/"+layout.SlotB.EntryFile(tries), buildEntry(layout.SlotB, b.version, "terrarium-2"))
	n.write(layout.SlotB.KernelPath(), string(b.kernel))
	n.write(layout.SlotB.InitrdPath(), string(b.initrd))
	dev := make([]byte, slotSize)
	copy(dev, b.rootfs)
	require.NoError(n.t, os.WriteFile(filepath.Join(n.devDir, layout.LabelSlotB), dev, 0o644))
	return n
}

// buildEntry is a slot's entry as the build writes it (TestRenderIsTheBuilds
// compares it with the build's own output in testdata/build).
func buildEntry(slot layout.Slot, version, sortKey string) string {
	return fmt.Sprintf("title Terrarium %s (slot %s)\nversion %s\nsort-key %s\nlinux /%s\ninitrd /%s\noptions console=ttyS0 quiet terrarium.slot=%s\n",
		version, slot, version, sortKey, slot.KernelPath(), slot.InitrdPath(), slot)
}

func (n *node) write(p, data string) {
	n.t.Helper()
	full := espPath(n.esp, p)
	require.NoError(n.t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(n.t, os.WriteFile(full, []byte(data), 0o644))
}

func (n *node) read(p string) string {
	n.t.Helper()
	data, err := os.ReadFile(espPath(n.esp, p))
	require.NoError(n.t, err)
	return string(data)
}

// rename renames an ESP file, as systemd-boot and Bless do.
func (n *node) rename(from, to string) {
	n.t.Helper()
	require.NoError(n.t, os.Rename(espPath(n.esp, from), espPath(n.esp, to)))
}

// options are Install's options for this node and upgrade v.
func (n *node) options(v *upgrade.Verified) Options {
	return Options{
		Upgrade: v, Running: n.running, Installed: n.release, Policy: upgrade.Refuse,
		Devices: ByPartLabel(n.devDir), ESP: n.esps, Reporter: n.reports, Clock: n.clock,
	}
}

// install installs build b.
func (n *node) install(b build) (Result, error) {
	n.builds[b.version] = b
	return Install(context.Background(), n.options(b.verified(n.t)))
}

// bootAndBless boots the slot systemd-boot picks and blesses it, as
// firstboot does when the health check passes.
func (n *node) bootAndBless() {
	n.t.Helper()
	e := n.nextBoot()
	if e.name.counted {
		n.rename(e.path(), layout.ESPEntriesDir+"/"+e.name.slot.EntryFile(0))
	}
	n.running = e.name.slot
	n.release.Version = e.version
}

// failTrial uses up every try of slot's counted entry, as systemd-boot
// does when its boots never pass the health check.
func (n *node) failTrial(slot layout.Slot) {
	n.t.Helper()
	for _, e := range n.entries() {
		if e.name.slot == slot && e.name.counted {
			n.rename(e.path(), fmt.Sprintf("%s/%s+0-%d.conf", layout.ESPEntriesDir, slot.EntryID(), e.name.tries()))
			return
		}
	}
	n.t.Fatalf("slot %s has no counted entry", slot)
}

// entries reads the slots' entries on the ESP.
func (n *node) entries() []entryFile {
	n.t.Helper()
	des, err := os.ReadDir(espPath(n.esp, layout.ESPEntriesDir))
	require.NoError(n.t, err)
	var out []entryFile
	for _, de := range des {
		if name, ok := parseEntryName(de.Name()); ok {
			out = append(out, entryFile{name: name, entry: parseEntry([]byte(n.read(layout.ESPEntriesDir + "/" + de.Name())))})
		}
	}
	return out
}

// entryOf returns slot's one entry.
func (n *node) entryOf(slot layout.Slot) entryFile {
	n.t.Helper()
	var found []entryFile
	for _, e := range n.entries() {
		if e.name.slot == slot {
			found = append(found, e)
		}
	}
	require.Len(n.t, found, 1, "entries of slot %s", slot)
	return found[0]
}

// slotHolds reports whether slot holds build b completely: its partition
// starts with b's rootfs and its kernel and initramfs on the ESP are b's.
func (n *node) slotHolds(slot layout.Slot, b build) bool {
	n.t.Helper()
	dev, err := os.ReadFile(filepath.Join(n.devDir, slot.Label()))
	require.NoError(n.t, err)
	kernel, kerr := os.ReadFile(espPath(n.esp, slot.KernelPath()))
	initrd, ierr := os.ReadFile(espPath(n.esp, slot.InitrdPath()))
	return kerr == nil && ierr == nil && bytes.HasPrefix(dev, b.rootfs) && bytes.Equal(kernel, b.kernel) && bytes.Equal(initrd, b.initrd)
}

// requireBootable checks that every slot entry on the ESP boots a slot
// that holds its build completely, and returns the next boot's entry.
func (n *node) requireBootable() entryFile {
	n.t.Helper()
	for _, e := range n.entries() {
		b, ok := n.builds[e.version]
		require.True(n.t, ok, "entry %s has version %q of no known build", e.name.file, e.version)
		require.True(n.t, n.slotHolds(e.name.slot, b), "entry %s is bootable but slot %s does not hold %s completely", e.name.file, e.name.slot, b.version)
	}
	next := n.nextBoot()
	assert.Equal(n.t, next.name.slot, n.grubNextBoot(), "GRUB (BIOS) boots the slot systemd-boot (UEFI) boots")
	return next
}

// leftovers lists the temporary files on the ESP.
func (n *node) leftovers() []string {
	var out []string
	_ = filepath.WalkDir(n.esp, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, tempSuffix) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// snapshot returns every file of the node's disks and their content.
func (n *node) snapshot() map[string]string {
	n.t.Helper()
	return snapshotDir(n.t, filepath.Dir(n.esp))
}

func snapshotDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, dir)] = string(data)
		return err
	}))
	return out
}

// dirESP is an ESP that is a directory. It fails a read-only use that
// changed it.
type dirESP struct {
	t      testing.TB
	dir    string
	mu     sync.Mutex
	mounts int
}

var _ ESP = (*dirESP)(nil)

func (d *dirESP) WithESP(write bool, fn func(dir string) error) error {
	d.mu.Lock()
	d.mounts++
	d.mu.Unlock()
	if write {
		return fn(d.dir)
	}
	before := snapshotDir(d.t, d.dir)
	err := fn(d.dir)
	if !assert.Equal(d.t, before, snapshotDir(d.t, d.dir), "the ESP changed under a read-only mount") {
		return errors.New("wrote to a read-only ESP")
	}
	return err
}

// fakeClock advances a second every time it is read.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

var _ host.Clock = (*fakeClock)(nil)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

// reports records what Install reports, one "result: detail" line each.
type reports struct {
	mu    sync.Mutex
	lines []string
}

var _ host.Reporter = (*reports)(nil)

func (r *reports) Report(name string, result step.Result, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, name+" "+string(result)+": "+detail)
}

func (r *reports) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

func hexSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
