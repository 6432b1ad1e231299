// Package efiboot reads and writes the UEFI boot manager's variables
// through efivarfs: a Boot#### load option for a disk's removable-media
// loader (\EFI\BOOT\BOOTX64.EFI on its EFI system partition, found by the
// partition's GPT GUID), its place in BootOrder, and BootNext. The
// installer uses it to make the installed disk boot first; the ISO's
// initramfs uses it to hand a boot over to an installed disk.
package efiboot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf16"

	"golang.org/x/sys/unix"
)

// GlobalGUID is EFI_GLOBAL_VARIABLE, the boot manager's variables' vendor.
const GlobalGUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"

// DefaultDir is where efivarfs is mounted.
const DefaultDir = "/sys/firmware/efi/efivars"

// firmwareDir exists when the kernel was started by UEFI firmware.
const firmwareDir = "/sys/firmware/efi"

// Booted reports whether the machine whose root is root ("/" on a node)
// booted under UEFI; false under BIOS, where there are no boot options.
func Booted(root string) bool {
	fi, err := os.Stat(filepath.Join(root, firmwareDir))
	return err == nil && fi.IsDir()
}

// LoaderPath is the removable-media loader every Terrarium ESP carries.
const LoaderPath = `\EFI\BOOT\BOOTX64.EFI`

// fsImmutableFL is FS_IMMUTABLE_FL (linux/fs.h), which efivarfs sets on
// its files; x/sys does not name it.
const fsImmutableFL = 0x00000010

// Variable attributes: non-volatile, boot service and runtime access.
const attrNVBSRT = 0x7

// loadOptionActive is LOAD_OPTION_ACTIVE.
const loadOptionActive = 0x1

// Partition names a GPT partition the way a Hard Drive Media Device Path
// does.
type Partition struct {
	Number uint32 // 1-based
	Start  uint64 // first LBA
	Size   uint64 // in LBAs
	GUID   string // the partition's unique GUID, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
}

// LoadOption is an EFI_LOAD_OPTION for a loader file on a GPT partition.
type LoadOption struct {
	Description string
	Partition   Partition
	Path        string // like LoaderPath
}

// Marshal encodes the load option: attributes (active), the device path
// list's length, the description (UCS-2, NUL-terminated), and the device
// path: a Hard Drive Media node, a File Path node, the end node.
func (o LoadOption) Marshal() ([]byte, error) {
	guid, err := guidBytes(o.Partition.GUID)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	// Hard Drive Media Device Path: type 4, subtype 1, 42 bytes.
	dp := []byte{0x04, 0x01, 42, 0}
	dp = le.AppendUint32(dp, o.Partition.Number)
	dp = le.AppendUint64(dp, o.Partition.Start)
	dp = le.AppendUint64(dp, o.Partition.Size)
	dp = append(dp, guid[:]...)
	dp = append(dp, 0x02, 0x02) // GPT, GUID signature
	// File Path Media Device Path: type 4, subtype 4.
	path := ucs2(o.Path)
	dp = append(dp, 0x04, 0x04)
	dp = le.AppendUint16(dp, uint16(4+len(path)))
	dp = append(dp, path...)
	// End of Hardware Device Path.
	dp = append(dp, 0x7f, 0xff, 0x04, 0x00)

	b := le.AppendUint32(nil, loadOptionActive)
	b = le.AppendUint16(b, uint16(len(dp)))
	b = append(b, ucs2(o.Description)...)
	return append(b, dp...), nil
}

// ParseDescription returns a load option's description (the part a boot
// menu shows) and the partition GUID of its first Hard Drive node, if any.
func ParseDescription(b []byte) (desc, partGUID string, err error) {
	if len(b) < 6 {
		return "", "", errors.New("load option too short")
	}
	dpLen := int(binary.LittleEndian.Uint16(b[4:6]))
	rest := b[6:]
	var runes []uint16
	i := 0
	for ; i+1 < len(rest); i += 2 {
		c := binary.LittleEndian.Uint16(rest[i:])
		if c == 0 {
			break
		}
		runes = append(runes, c)
	}
	if i+1 >= len(rest) {
		return "", "", errors.New("load option description not terminated")
	}
	dp := rest[i+2:]
	if dpLen > len(dp) {
		return "", "", errors.New("load option device path truncated")
	}
	dp = dp[:dpLen]
	for len(dp) >= 4 {
		n := int(binary.LittleEndian.Uint16(dp[2:4]))
		if n < 4 || n > len(dp) {
			return "", "", errors.New("load option device path node has a bad length")
		}
		if dp[0] == 0x04 && dp[1] == 0x01 && n == 42 {
			partGUID = guidString([16]byte(dp[24:40]))
		}
		if dp[0] == 0x7f && dp[1] == 0xff {
			break
		}
		dp = dp[n:]
	}
	return string(utf16.Decode(runes)), partGUID, nil
}

func ucs2(s string) []byte {
	u := utf16.Encode([]rune(s + "\x00"))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}

// guidBytes encodes a GUID string the way EFI stores it: the first three
// fields little-endian, the rest as written.
func guidBytes(s string) ([16]byte, error) {
	var out [16]byte
	hexs := strings.ReplaceAll(s, "-", "")
	if len(s) != 36 || len(hexs) != 32 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return out, fmt.Errorf("%q is not a GUID", s)
	}
	var raw [16]byte
	for i := 0; i < 16; i++ {
		v, err := strconv.ParseUint(hexs[2*i:2*i+2], 16, 8)
		if err != nil {
			return out, fmt.Errorf("%q is not a GUID", s)
		}
		raw[i] = byte(v)
	}
	out = raw
	out[0], out[1], out[2], out[3] = raw[3], raw[2], raw[1], raw[0]
	out[4], out[5] = raw[5], raw[4]
	out[6], out[7] = raw[7], raw[6]
	return out, nil
}

func guidString(b [16]byte) string {
	return fmt.Sprintf("%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])
}

// Vars is the boot manager's variables in an efivarfs directory.
type Vars struct {
	Dir string
}

func (v Vars) path(name string) string { return filepath.Join(v.Dir, name+"-"+GlobalGUID) }

// TerrariumGUID is the vendor GUID of Terrarium's own variables.
const TerrariumGUID = "5d3f0a4e-7b21-4c8e-9f6a-2e1b7c9d4a10"

// HandoverVar is set by the ISO's initramfs when it hands a boot over to
// an installed disk, and removed by the installed system's initramfs: an
// ISO that finds it set knows the handover failed, and does not try again.
const HandoverVar = "TerrariumHandover"

// Own is one of Terrarium's own variables (vendor TerrariumGUID).
type Own struct {
	Dir, Name string
}

func (o Own) path() string { return filepath.Join(o.Dir, o.Name+"-"+TerrariumGUID) }

// Get returns the variable's value, or false when it is absent.
func (o Own) Get() ([]byte, bool, error) {
	b, err := readVar(o.path(), o.Name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}

// Set writes the variable (non-volatile).
func (o Own) Set(data []byte) error {
	return writeVar(o.path(), o.Name, data)
}

// Delete removes the variable; an absent one is not an error.
func (o Own) Delete() error {
	p := o.path()
	if err := mutable(p, o.Name); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("efi variable %s: %w", o.Name, err)
	}
	return nil
}

func (v Vars) read(name string) ([]byte, error) { return readVar(v.path(name), name) }

// readVar reads the efivarfs file p of variable name: its value, without
// the attributes efivarfs puts first.
func readVar(p, name string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("efi variable %s: %w", name, err)
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("efi variable %s: %d bytes, no attributes", name, len(b))
	}
	return b[4:], nil
}

func (v Vars) write(name string, data []byte) error { return writeVar(v.path(name), name, data) }

// mutable clears the immutable flag efivarfs puts on its files (a
// directory that is not efivarfs, in tests, has no such flag).
func mutable(p, name string) error {
	f, err := os.Open(p)
	if err != nil {
		return nil // absent: nothing to clear
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err == nil && flags&fsImmutableFL != 0 {
		if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags&^fsImmutableFL)); err != nil {
			return fmt.Errorf("efi variable %s: make it writable: %w", name, err)
		}
	}
	return nil
}

// writeVar replaces a variable: attributes (NV, BS, RT), then data, in
// one write, as efivarfs takes them.
func writeVar(p, name string, data []byte) error {
	if err := mutable(p, name); err != nil {
		return err
	}
	buf := make([]byte, 4+len(data))
	binary.LittleEndian.PutUint32(buf, attrNVBSRT)
	copy(buf[4:], data)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("efi variable %s: %w", name, err)
	}
	if _, err := f.Write(buf); err != nil {
		_ = f.Close()
		return fmt.Errorf("efi variable %s: %w", name, err)
	}
	return f.Close()
}

// BootOrder returns the BootOrder variable (nil when it is absent).
func (v Vars) BootOrder() ([]uint16, error) {
	b, err := v.read("BootOrder")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out, nil
}

func (v Vars) setBootOrder(order []uint16) error {
	b := make([]byte, 2*len(order))
	for i, n := range order {
		binary.LittleEndian.PutUint16(b[2*i:], n)
	}
	return v.write("BootOrder", b)
}

// options lists the existing Boot#### variables by number.
func (v Vars) options() (map[uint16][]byte, error) {
	entries, err := os.ReadDir(v.Dir)
	if err != nil {
		return nil, fmt.Errorf("efi variables: %w", err)
	}
	out := map[uint16][]byte{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), "-"+GlobalGUID)
		if !ok || len(name) != 8 || !strings.HasPrefix(name, "Boot") {
			continue
		}
		n, err := strconv.ParseUint(name[4:], 16, 16)
		if err != nil {
			continue
		}
		if b, err := v.read(name); err == nil {
			out[uint16(n)] = b
		}
	}
	return out, nil
}

// Find returns the number of the load option whose Hard Drive node names
// partition guid.
func (v Vars) Find(guid string) (uint16, bool, error) {
	opts, err := v.options()
	if err != nil {
		return 0, false, err
	}
	for n, b := range opts {
		if _, g, err := ParseDescription(b); err == nil && strings.EqualFold(g, guid) {
			return n, true, nil
		}
	}
	return 0, false, nil
}

// Ensure writes o as a load option (reusing the one that already names
// its partition, else the first free number) and returns its number.
func (v Vars) Ensure(o LoadOption) (uint16, error) {
	data, err := o.Marshal()
	if err != nil {
		return 0, err
	}
	n, found, err := v.Find(o.Partition.GUID)
	if err != nil {
		return 0, err
	}
	if !found {
		opts, err := v.options()
		if err != nil {
			return 0, err
		}
		for n = 0; ; n++ {
			if _, used := opts[n]; !used {
				break
			}
		}
	}
	return n, v.write(fmt.Sprintf("Boot%04X", n), data)
}

// First puts option n first in BootOrder.
func (v Vars) First(n uint16) error {
	order, err := v.BootOrder()
	if err != nil {
		return err
	}
	out := []uint16{n}
	for _, o := range order {
		if o != n {
			out = append(out, o)
		}
	}
	return v.setBootOrder(out)
}

// Next sets BootNext: the firmware boots option n once, next.
func (v Vars) Next(n uint16) error {
	return v.write("BootNext", binary.LittleEndian.AppendUint16(nil, n))
}
