package secureboot

import (
	"debug/pe"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The build host's systemd-boot-efi files (Debian's paths), which the
// tests sign and build UKIs on.
const (
	hostStub     = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	hostSDBoot   = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"
	testSite     = "plant-7"
	testOwnerStr = "a8f1e0c2-5b3d-4e6f-9a7b-1c2d3e4f5a6b"
)

// testTime is the tests' fixed clock.
func testTime() time.Time { return time.Date(2027, 3, 4, 5, 6, 7, 0, time.UTC) }

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s not found: run make deps", name)
	return p
}

// requireHostFile fails (never skips) when a file of a Debian package the
// tests need is missing.
func requireHostFile(t *testing.T, path, pkg string) string {
	t.Helper()
	_, err := os.Stat(path)
	require.NoError(t, err, "%s (Debian package %s) not found: run make deps", path, pkg)
	return path
}

// runTool runs a tool and fails the test with its output if it fails.
func runTool(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(requireTool(t, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

// newTestKeySet generates a key set in a new temporary directory.
func newTestKeySet(t *testing.T) *KeySet {
	t.Helper()
	ks, err := Generate(filepath.Join(t.TempDir(), "keys"), testSite, WithTime(testTime()))
	require.NoError(t, err)
	return ks
}

// writeFile writes data to a new file in dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// syntheticStub is a minimal PE32+ x86-64 EFI application with two
// sections (.text, .data) at imageBase and sectAlign, file alignment
// 0x200: a stand-in for stubs other than the host's, e.g. trixie's
// systemd-stub (image base 0x14df90000, section alignment 0x1000).
func syntheticStub(imageBase uint64, sectAlign uint32) []byte {
	const (
		fileAlign = 0x200
		lfanew    = 0x80
		optSize   = 240
		headers   = 0x400
	)
	le := binary.LittleEndian
	align := func(v uint32) uint32 { return (v + sectAlign - 1) / sectAlign * sectAlign }
	textVA := align(headers)
	dataVA := align(textVA + 0x10)
	b := make([]byte, headers+2*fileAlign)
	copy(b, "MZ")
	le.PutUint32(b[0x3c:], lfanew)
	copy(b[lfanew:], "PE\x00\x00")
	c := b[lfanew+4:]
	le.PutUint16(c[0:], 0x8664)
	le.PutUint16(c[2:], 2)
	le.PutUint16(c[16:], optSize)
	le.PutUint16(c[18:], 0x0206)
	o := c[20:]
	le.PutUint16(o[0:], 0x20b)
	le.PutUint32(o[4:], fileAlign)           // SizeOfCode
	le.PutUint32(o[8:], fileAlign)           // SizeOfInitializedData
	le.PutUint32(o[16:], textVA)             // AddressOfEntryPoint
	le.PutUint32(o[20:], textVA)             // BaseOfCode
	le.PutUint64(o[24:], imageBase)          // ImageBase
	le.PutUint32(o[32:], sectAlign)          // SectionAlignment
	le.PutUint32(o[36:], fileAlign)          // FileAlignment
	le.PutUint32(o[56:], align(dataVA+0x20)) // SizeOfImage
	le.PutUint32(o[60:], headers)            // SizeOfHeaders
	le.PutUint16(o[68:], 10)                 // Subsystem: EFI application
	le.PutUint32(o[108:], 16)                // NumberOfRvaAndSizes
	for i, s := range []struct {
		name   string
		va, vs uint32
		flags  uint32
	}{{".text", textVA, 0x10, 0x60000020}, {".data", dataVA, 0x20, 0xc0000040}} {
		h := o[optSize+40*i:]
		copy(h, s.name)
		le.PutUint32(h[8:], s.vs)
		le.PutUint32(h[12:], s.va)
		le.PutUint32(h[16:], fileAlign)
		le.PutUint32(h[20:], headers+uint32(i)*fileAlign)
		le.PutUint32(h[36:], s.flags)
	}
	b[headers] = 0xc3 // ret
	copy(b[headers+fileAlign:], "synthetic stub data")
	return b
}

// peOpen opens a PE file with debug/pe.
func peOpen(path string) (*pe.File, error) { return pe.Open(path) }
