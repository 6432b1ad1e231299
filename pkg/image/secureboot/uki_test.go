package secureboot

import (
	"bytes"
	"crypto/rand"
	"debug/pe"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ukiInputs are a UKI's file contents: a stand-in kernel (an MZ header and
// random bytes: the UKI does not look inside) and initramfs of odd sizes.
type ukiInputs struct {
	kernel, initrd []byte
	u              UKI
}

func newUKIInputs(t *testing.T, stub string, kernelSize, initrdSize int) ukiInputs {
	t.Helper()
	dir := t.TempDir()
	in := ukiInputs{kernel: make([]byte, kernelSize), initrd: make([]byte, initrdSize)}
	_, err := rand.Read(in.kernel)
	require.NoError(t, err)
	copy(in.kernel, "MZ")
	_, err = rand.Read(in.initrd)
	require.NoError(t, err)
	in.u = UKI{
		Stub:      stub,
		Kernel:    writeFile(t, dir, "vmlinuz", in.kernel),
		Initrd:    writeFile(t, dir, "initrd.img", in.initrd),
		Cmdline:   "console=ttyS0,115200 quiet terrarium.slot=a",
		OSRelease: "ID=terrarium\nNAME=Terrarium\nVERSION_ID=1.2.3\nIMAGE_ID=terrarium\nIMAGE_VERSION=1.2.3\n",
		Uname:     "6.12.57+deb13-amd64",
	}
	return in
}

// stubs are the systemd-stubs the UKI tests build on: the host's
// (systemd 252: image base 0, section alignment 0x200, sections not all at
// it) and a synthetic one laid out like trixie's (image base 0x14df90000,
// section alignment 0x1000).
func stubs(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{
		"host systemd-stub": requireHostFile(t, hostStub, "systemd-boot-efi"),
		"trixie-like stub":  writeFile(t, t.TempDir(), "synthetic.efi.stub", syntheticStub(0x14df90000, 0x1000)),
		"512-byte sections": writeFile(t, t.TempDir(), "synthetic-512.efi.stub", syntheticStub(0, 0x200)),
	}
}

func TestWriteUKI(t *testing.T) {
	for stubName, stub := range stubs(t) {
		for _, tc := range []struct {
			name               string
			kernel, initrd     int
			osrelease, unameOK bool
		}{
			{name: "all sections", kernel: 3<<20 + 17, initrd: 1<<20 + 3, osrelease: true, unameOK: true},
			{name: "no os-release or uname", kernel: 4097, initrd: 1},
			{name: "sizes at the alignment", kernel: 0x2000, initrd: 0x1000, osrelease: true},
		} {
			t.Run(stubName+"/"+tc.name, func(t *testing.T) {
				in := newUKIInputs(t, stub, tc.kernel, tc.initrd)
				if !tc.osrelease {
					in.u.OSRelease = ""
				}
				if !tc.unameOK {
					in.u.Uname = ""
				}
				out := filepath.Join(t.TempDir(), "terrarium-a.efi")
				require.NoError(t, WriteUKI(in.u, out))
				checkUKI(t, stub, out, in)

				// The same inputs give the same bytes.
				again := filepath.Join(t.TempDir(), "again.efi")
				require.NoError(t, WriteUKI(in.u, again))
				b1, err := os.ReadFile(out)
				require.NoError(t, err)
				b2, err := os.ReadFile(again)
				require.NoError(t, err)
				assert.True(t, bytes.Equal(b1, b2), "reproducible")
			})
		}
	}
}

// checkUKI checks a UKI written from in on stub: the sections hold exactly
// the inputs (ReadUKI and debug/pe), at the alignments, in order after the
// stub's own, which are unchanged; and binutils reads it as a PE.
func checkUKI(t *testing.T, stub, path string, in ukiInputs) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	got, err := ReadUKI(f, fi.Size())
	require.NoError(t, err)
	want := map[string][]byte{SectionLinux: in.kernel, SectionInitrd: in.initrd, SectionCmdline: []byte(in.u.Cmdline)}
	if in.u.OSRelease != "" {
		want[SectionOSRel] = []byte(in.u.OSRelease)
	}
	if in.u.Uname != "" {
		want[SectionUname] = []byte(in.u.Uname)
	}
	require.Equal(t, len(want), len(got), "sections")
	for name, b := range want {
		assert.True(t, bytes.Equal(b, got[name]), "section %s holds its input exactly", name)
	}

	img, err := pe.NewFile(f)
	require.NoError(t, err)
	stubImg, err := pe.Open(stub)
	require.NoError(t, err)
	defer stubImg.Close()
	oh := img.OptionalHeader.(*pe.OptionalHeader64)
	soh := stubImg.OptionalHeader.(*pe.OptionalHeader64)
	assert.Equal(t, soh.ImageBase, oh.ImageBase)
	assert.Equal(t, soh.AddressOfEntryPoint, oh.AddressOfEntryPoint)
	assert.Equal(t, soh.SectionAlignment, oh.SectionAlignment)
	assert.Zero(t, oh.CheckSum)
	n := len(stubImg.Sections)
	require.Greater(t, len(img.Sections), n)
	for i, s := range stubImg.Sections {
		assert.Equal(t, s.SectionHeader, img.Sections[i].SectionHeader, "stub section %s unchanged", s.Name)
		sd, err := s.Data()
		require.NoError(t, err)
		d, err := img.Sections[i].Data()
		require.NoError(t, err)
		assert.Equal(t, sd, d, "stub section %s's data unchanged", s.Name)
	}
	var names []string
	prevEnd := uint32(0)
	for _, s := range img.Sections[n:] {
		names = append(names, s.Name)
		assert.Zero(t, s.VirtualAddress%oh.SectionAlignment, "%s at the section alignment", s.Name)
		assert.Zero(t, s.Offset%oh.FileAlignment, "%s's data at the file alignment", s.Name)
		assert.Zero(t, s.Size%oh.FileAlignment, "%s's raw size at the file alignment", s.Name)
		assert.Equal(t, uint32(len(want[s.Name])), s.VirtualSize, s.Name)
		assert.GreaterOrEqual(t, s.VirtualAddress, prevEnd)
		prevEnd = s.VirtualAddress + s.VirtualSize
		flags := uint32(pe.IMAGE_SCN_CNT_INITIALIZED_DATA | pe.IMAGE_SCN_MEM_READ)
		if s.Name == SectionLinux {
			flags = pe.IMAGE_SCN_CNT_CODE | pe.IMAGE_SCN_MEM_READ
		}
		assert.Equal(t, flags, s.Characteristics, s.Name)
	}
	last := img.Sections[len(img.Sections)-1]
	assert.Equal(t, SectionLinux, last.Name, "the kernel last")
	assert.Equal(t, (last.VirtualAddress+last.VirtualSize+oh.SectionAlignment-1)/oh.SectionAlignment*oh.SectionAlignment, oh.SizeOfImage)
	order := []string{}
	for _, s := range UKISections() {
		if _, ok := want[s]; ok {
			order = append(order, s)
		}
	}
	assert.Equal(t, order, names)

	// binutils reads the same sections.
	objdump := runTool(t, nil, "objdump", "-h", path)
	for name := range want {
		assert.Contains(t, objdump, " "+name+" ", "objdump -h lists %s", name)
	}
}

func TestWriteUKIRefuses(t *testing.T) {
	stub := writeFile(t, t.TempDir(), "stub", syntheticStub(0x14df90000, 0x1000))
	signedStub := filepath.Join(t.TempDir(), "signed-stub")
	ks := newTestKeySet(t)
	require.NoError(t, SignPE(t.Context(), &ks.DB, stub, signedStub))
	withLinux := syntheticStub(0, 0x1000)
	copy(withLinux[0x80+4+20+240:], ".linux\x00\x00") // the first section's name
	full := syntheticStub(0, 0x1000)
	copy(full[0x80+4+20+240+80:], "junk") // the room after the section table used

	for _, tc := range []struct {
		name   string
		change func(t *testing.T, u *UKI)
		want   string
	}{
		{"no command line", func(t *testing.T, u *UKI) { u.Cmdline = "" }, "no command line"},
		{"a newline in the command line", func(t *testing.T, u *UKI) { u.Cmdline += "\n" }, "control character"},
		{"no kernel", func(t *testing.T, u *UKI) { u.Kernel = filepath.Join(t.TempDir(), "none") }, "no such file"},
		{"empty initrd", func(t *testing.T, u *UKI) { u.Initrd = writeFile(t, t.TempDir(), "empty", nil) }, "not a regular file with content"},
		{"kernel without MZ", func(t *testing.T, u *UKI) { u.Kernel = u.Initrd }, "not an EFI-stub kernel"},
		{"stub not a PE", func(t *testing.T, u *UKI) { u.Stub = u.Initrd }, "no MZ header"},
		{"stub signed", func(t *testing.T, u *UKI) { u.Stub = signedStub }, "signed already"},
		{"stub with a .linux", func(t *testing.T, u *UKI) { u.Stub = writeFile(t, t.TempDir(), "stub", withLinux) }, "has a .linux section already"},
		{"stub without room", func(t *testing.T, u *UKI) { u.Stub = writeFile(t, t.TempDir(), "stub", full) }, "not empty"},
		{"stub for another machine", func(t *testing.T, u *UKI) {
			b := syntheticStub(0, 0x1000)
			b[0x85] = 0xaa // machine 0xaa64: arm64
			u.Stub = writeFile(t, t.TempDir(), "stub", b)
		}, "not x86-64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newUKIInputs(t, stub, 5000, 100)
			tc.change(t, &in.u)
			out := filepath.Join(t.TempDir(), "uki.efi")
			err := WriteUKI(in.u, out)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "write UKI "+out), err.Error())
			_, statErr := os.Stat(out)
			assert.True(t, os.IsNotExist(statErr), "nothing left behind")
		})
	}
}

func TestReadUKIMalformed(t *testing.T) {
	in := newUKIInputs(t, writeFile(t, t.TempDir(), "stub", syntheticStub(0x14df90000, 0x1000)), 3000, 200)
	out := filepath.Join(t.TempDir(), "uki.efi")
	require.NoError(t, WriteUKI(in.u, out))
	good, err := os.ReadFile(out)
	require.NoError(t, err)
	// The new sections' headers follow the stub's two.
	hdr := func(i int) int { return 0x80 + 4 + 20 + 240 + 40*i }
	patch := func(off int, v ...byte) []byte {
		b := bytes.Clone(good)
		copy(b[off:], v)
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"not a PE", []byte("MZ and nothing")},
		{"cut short", good[:len(good)-1]},
		{".cmdline not at the section alignment", patch(hdr(3)+12, 0x10)},
		{".osrel over the stub's .text", patch(hdr(2)+13, 0x10)},
		{"content longer than its raw data", patch(hdr(3)+8, 0xff, 0xff)},
		{"no .linux", patch(hdr(6), '.', 'l', 'i', 'n', 'u', 'y')},
		{"two .initrd", patch(hdr(4), '.', 'i', 'n', 'i', 't', 'r', 'd', 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadUKI(bytes.NewReader(tc.data), int64(len(tc.data)))
			assert.ErrorIs(t, err, ErrMalformed)
		})
	}
}
