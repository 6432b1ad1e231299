package qemutests

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// removeScratch removes a scratch file of the test's, which may be gone
// already.
func removeScratch(t testing.TB, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("remove %s: %v", path, err)
	}
}

// stateDisk is a stopped machine's TERRA-STATE, copied to a raw file of
// its own for inspection with debugfs (read-only).
type stateDisk struct {
	t    testing.TB
	raw  string
	size int64 // the partition's, from the GPT
}

// flatten converts the stopped machine's disk to a raw file named name in
// its directory (removed when the test ends) and finds the partition
// labelled label in its GPT.
func (m *machine) flatten(name, label string) (raw string, part *gpt.Partition) {
	m.t.Helper()
	raw = filepath.Join(m.dir, name)
	removeScratch(m.t, raw) // a leftover of an earlier run
	if out, err := exec.Command("qemu-img", "convert", "-O", "raw", m.disk, raw).CombinedOutput(); err != nil {
		m.t.Fatalf("qemu-img convert: %v: %s", err, out)
	}
	m.t.Cleanup(func() { removeScratch(m.t, raw) })
	d, err := diskfs.Open(raw, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		m.t.Fatal(err)
	}
	defer d.Close()
	pt, err := d.GetPartitionTable()
	if err != nil {
		m.t.Fatalf("read GPT: %v", err)
	}
	for _, p := range pt.(*gpt.Table).Partitions {
		if p.Name == label {
			return raw, p
		}
	}
	m.t.Fatalf("no %s partition on %s", label, m.disk)
	return "", nil
}

// partitionOffset is where the partition labelled label starts on the
// stopped machine's disk, in bytes.
func (m *machine) partitionOffset(label string) int64 {
	m.t.Helper()
	raw, p := m.flatten("gpt.raw", label)
	removeScratch(m.t, raw)
	return int64(p.Start) * layout.SectorSize
}

func (m *machine) inspectState() *stateDisk {
	m.t.Helper()
	disk, p := m.flatten("inspect.raw", layout.LabelState)
	s := &stateDisk{t: m.t, raw: filepath.Join(m.dir, "state.raw"), size: int64(p.Size)}
	// The partition alone, sparse: e2fsprogs' journal recovery does not
	// honour an "?offset=" on the device name (debugfs journal_run says
	// "Bad magic number in super-block" and exits 0).
	removeScratch(m.t, s.raw) // a leftover of an earlier run
	opts := fmt.Sprintf("driver=raw,offset=%d,size=%d,file.driver=file,file.filename=%s", int64(p.Start)*layout.SectorSize, s.size, disk)
	if out, err := exec.Command("qemu-img", "convert", "--image-opts", opts, "-O", "raw", s.raw).CombinedOutput(); err != nil {
		m.t.Fatalf("qemu-img convert TERRA-STATE out of %s: %v: %s", disk, err, out)
	}
	removeScratch(m.t, disk)
	m.t.Cleanup(func() { removeScratch(m.t, s.raw) })
	s.replayJournal()
	return s
}

// replayJournal applies ext4's journal to the copy, as the kernel does
// when it mounts the filesystem after a power cut (a QEMU quit is one):
// what firstboot synced (fsync commits it to the journal) is in the
// journal until ext4 checkpoints it, and debugfs alone reads only the
// checkpointed metadata, whose bitmaps may not match their checksums yet.
// e2fsck exits 1 when it replayed a journal, 0 when there was none.
func (s *stateDisk) replayJournal() {
	s.t.Helper()
	out, err := exec.Command("e2fsck", "-y", "-E", "journal_only", s.raw).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		s.t.Fatalf("e2fsck -E journal_only %s: %v\n%s", s.raw, err, out)
	}
	if f := featuresRE.FindString(s.debugfs("stats")); f == "" || strings.Contains(f, "needs_recovery") {
		s.t.Fatalf("TERRA-STATE's journal was not replayed (%q):\n%s", f, out)
	}
}

var featuresRE = regexp.MustCompile(`(?m)^Filesystem features:.*$`)

func (s *stateDisk) debugfs(req string) string {
	s.t.Helper()
	out, _ := s.debugfsOutput(req)
	return out
}

// debugfsOutput runs debugfs; it exits 0 even when it cannot open the
// filesystem, and says why on stderr, which is returned for messages.

func (s *stateDisk) debugfsOutput(req string) (stdout, stderr string) {
	s.t.Helper()
	var errb bytes.Buffer
	cmd := exec.Command("debugfs", "-R", req, s.raw)
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("debugfs %q: %v\n%s", req, err, errb.String())
	}
	return string(out), errb.String()
}

// readFile is a file's content; "" for a file that does not exist. A
// filesystem debugfs cannot read fails the test, with debugfs's words:
// read as "", it would pass every check that a file is absent.
func (s *stateDisk) readFile(p string) string {
	s.t.Helper()
	out, errs := s.debugfsOutput("cat " + p)
	for _, line := range strings.Split(strings.TrimSpace(errs), "\n") {
		if line == "" || strings.HasPrefix(line, "debugfs ") || strings.Contains(line, "File not found by ext2_lookup") {
			continue
		}
		s.t.Fatalf("debugfs cat %s: %s", p, errs)
	}
	return out
}

var blockCountRE, blockSizeRE = regexp.MustCompile(`(?m)^Block count:\s+(\d+)`), regexp.MustCompile(`(?m)^Block size:\s+(\d+)`)

// fsBytes is the size of the filesystem on STATE (its superblock's).
func (s *stateDisk) fsBytes() int64 {
	s.t.Helper()
	stats := s.debugfs("stats")
	c, b := blockCountRE.FindStringSubmatch(stats), blockSizeRE.FindStringSubmatch(stats)
	if c == nil || b == nil {
		s.t.Fatalf("debugfs stats: no block count or size:\n%s", stats)
	}
	count, _ := strconv.ParseInt(c[1], 10, 64)
	size, _ := strconv.ParseInt(b[1], 10, 64)
	return count * size
}

var uuidRE = regexp.MustCompile(`Filesystem UUID:\s+(\S+)`)

func (s *stateDisk) fsUUID() string {
	s.t.Helper()
	m := uuidRE.FindStringSubmatch(s.debugfs("stats"))
	if m == nil {
		_, stderr := s.debugfsOutput("stats")
		s.t.Fatalf("debugfs stats: no filesystem UUID\n%s", stderr)
	}
	return m[1]
}

// checkCapture asserts that every IP packet in a pcap file stayed on the
// test network: IPv4 inside subnet (or DHCP's 0.0.0.0/broadcast), IPv6
// link-local or multicast only.
// pcapFrames reads the frames of a little-endian pcap capture (QEMU's
// filter-dump). A capture still being written may end in a partial
// record, which is left out.
func pcapFrames(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read capture: %v", err)
	}
	if len(data) < 24 || binary.LittleEndian.Uint32(data) != 0xa1b2c3d4 {
		t.Fatalf("%s is not a little-endian pcap file", path)
	}
	var frames [][]byte
	for off := 24; off+16 <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[off+8:]))
		if off+16+n > len(data) {
			break
		}
		frames = append(frames, data[off+16:off+16+n])
		off += 16 + n
	}
	return frames
}

func checkCapture(t *testing.T, path string, subnet *net.IPNet) (packets int) {
	t.Helper()
	ok4 := func(ip net.IP) bool {
		return subnet.Contains(ip) || ip.Equal(net.IPv4zero) || ip.Equal(net.IPv4bcast)
	}
	ok6 := func(ip net.IP) bool { return ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified() }
	for _, frame := range pcapFrames(t, path) {
		if len(frame) < 14 {
			continue
		}
		payload := frame[14:]
		switch binary.BigEndian.Uint16(frame[12:14]) {
		case 0x0800:
			if len(payload) < 20 {
				continue
			}
			src, dst := net.IP(payload[12:16]), net.IP(payload[16:20])
			if !ok4(src) || !ok4(dst) {
				t.Errorf("packet %d left the test network: %s -> %s", packets, src, dst)
			}
		case 0x86dd:
			if len(payload) < 40 {
				continue
			}
			src, dst := net.IP(payload[8:24]), net.IP(payload[24:40])
			if !ok6(src) || !ok6(dst) {
				t.Errorf("IPv6 packet %d left the link: %s -> %s", packets, src, dst)
			}
		}
		packets++
	}
	return packets
}
