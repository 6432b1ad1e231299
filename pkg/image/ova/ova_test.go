package ova_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmware/govmomi/ovf"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/terrarium-os/terrarium/pkg/image/ova"
	"github.com/terrarium-os/terrarium/pkg/image/vmdk"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const name = "terrarium"

var epoch = time.Unix(1767225600, 0).UTC()

// rawDisk returns a small disk image: random and zero regions, not a
// whole number of grains.
func rawDisk() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 3<<20+7*512)
	for off := 0; off < len(raw); off += 256 << 10 {
		if off%(512<<10) == 0 {
			for i := off; i < min(off+100<<10, len(raw)); i++ {
				raw[i] = byte(rng.Uint32())
			}
		}
	}
	return raw
}

// build writes the VMDK of raw and the OVA of that VMDK.
func build(t *testing.T, raw []byte, opts ...ova.Option) (ovaData, vmdkData []byte) {
	t.Helper()
	ctx := context.Background()
	var disk bytes.Buffer
	st, err := vmdk.Write(ctx, &disk, bytes.NewReader(raw), int64(len(raw)), vmdk.WithExtentName(name+".vmdk"))
	require.NoError(t, err)
	var out bytes.Buffer
	err = ova.Write(ctx, &out, name, ova.Disk{
		Content: bytes.NewReader(disk.Bytes()), Size: st.Size, Capacity: st.Capacity, Populated: st.Populated,
	}, opts...)
	require.NoError(t, err)
	return out.Bytes(), disk.Bytes()
}

// member is one file of an OVA.
type member struct {
	header *tar.Header
	data   []byte
}

func readTar(t *testing.T, data []byte) []member {
	t.Helper()
	var out []member
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		out = append(out, member{h, b})
	}
}

func TestOVA(t *testing.T) {
	raw := rawDisk()
	data, disk := build(t, raw, ova.WithVersion("1.2.3"), ova.WithModTime(epoch))
	members := readTar(t, data)

	t.Run("members", func(t *testing.T) {
		require.Len(t, members, 3)
		for i, want := range []string{name + ".ovf", name + ".mf", name + ".vmdk"} {
			h := members[i].header
			assert.Equal(t, want, h.Name, "member %d", i)
			assert.Equal(t, byte(tar.TypeReg), h.Typeflag)
			assert.Equal(t, int64(0o644), h.Mode)
			assert.Zero(t, h.Uid)
			assert.Zero(t, h.Gid)
			assert.True(t, epoch.Equal(h.ModTime), "%s: mtime %s", h.Name, h.ModTime)
		}
		assert.Equal(t, "ustar\x0000", string(data[257:265]), "the first header is POSIX ustar")
		assert.Equal(t, disk, members[2].data)
	})

	t.Run("manifest", func(t *testing.T) {
		line := regexp.MustCompile(`^SHA256\(([^)]+)\)= ([0-9a-f]{64})$`)
		lines := bytes.Split(bytes.TrimSuffix(members[1].data, []byte("\n")), []byte("\n"))
		require.Len(t, lines, 2)
		content := map[string][]byte{}
		for _, m := range members {
			content[m.header.Name] = m.data
		}
		for i, want := range []string{name + ".ovf", name + ".vmdk"} {
			m := line.FindSubmatch(lines[i])
			require.NotNil(t, m, "manifest line %q", lines[i])
			assert.Equal(t, want, string(m[1]))
			sum := sha256.Sum256(content[want])
			assert.Equal(t, hex.EncodeToString(sum[:]), string(m[2]), "digest of %s", want)
		}
	})

	env, err := ovf.Unmarshal(bytes.NewReader(members[0].data))
	require.NoError(t, err, "govmomi's ovf package parses the descriptor")

	t.Run("envelope", func(t *testing.T) {
		require.Len(t, env.References, 1)
		ref := env.References[0]
		assert.Equal(t, name+".vmdk", ref.Href)
		assert.Equal(t, uint(len(disk)), ref.Size, "the file size in References is the VMDK's")
		require.NotNil(t, env.Disk)
		require.Len(t, env.Disk.Disks, 1)
		d := env.Disk.Disks[0]
		assert.Equal(t, ref.ID, *d.FileRef)
		assert.Equal(t, fmt.Sprint(len(raw)), d.Capacity)
		assert.Equal(t, "byte", *d.CapacityAllocationUnits)
		assert.Equal(t, ova.DiskFormat, *d.Format)

		vs := env.VirtualSystem
		require.NotNil(t, vs)
		assert.Equal(t, name, vs.ID)
		assert.Equal(t, "other3xLinux64Guest", *vs.OperatingSystem.OSType)
		require.Len(t, vs.VirtualHardware, 1)
		hw := vs.VirtualHardware[0]
		assert.Equal(t, "vmx-13", *hw.System.VirtualSystemType)
		firmware := ""
		for _, c := range hw.Config {
			if c.Key == "firmware" {
				firmware = c.Value
				assert.False(t, *c.Required)
			}
		}
		assert.Equal(t, "efi", firmware)

		require.Len(t, vs.Product, 1)
		assert.Equal(t, "1.2.3", vs.Product[0].Version)
		var keys []string
		for _, p := range vs.Product[0].Property {
			keys = append(keys, vs.Product[0].Key(p))
			assert.Equal(t, "string", p.Type, p.Key)
			require.NotNil(t, p.UserConfigurable, p.Key)
			assert.True(t, *p.UserConfigurable, p.Key)
			require.NotNil(t, p.Label, p.Key)
			assert.NotEmpty(t, *p.Label, p.Key)
		}
		assert.Equal(t, []string{ova.PropConfig, ova.PropHostname, ova.PropAddress, ova.PropGateway, ova.PropDNS, ova.PropSSHKey}, keys)
	})

	t.Run("config spec", func(t *testing.T) {
		// govmomi turns the envelope into the spec vSphere creates the VM
		// from; Strict refuses any item it does not know.
		spec, err := env.ToConfigSpecWithOptions(ovf.ToConfigSpecOptions{Strict: true})
		require.NoError(t, err)
		assert.Equal(t, "efi", spec.Firmware)
		assert.Equal(t, "vmx-13", spec.Version)
		assert.Equal(t, int32(2), spec.NumCPUs)
		assert.Equal(t, int64(4096), spec.MemoryMB)
		var devices []string
		for _, c := range spec.DeviceChange {
			dev := c.GetVirtualDeviceConfigSpec().Device
			devices = append(devices, fmt.Sprintf("%T", dev))
			if d, ok := dev.(*types.VirtualDisk); ok {
				assert.Equal(t, int64(len(raw)), d.CapacityInBytes)
			}
		}
		assert.Equal(t, []string{"*types.VirtualAHCIController", "*types.VirtualDisk", "*types.VirtualCdrom", "*types.VirtualVmxnet3"}, devices)
		require.NotNil(t, spec.VAppConfig)
		assert.Len(t, spec.VAppConfig.GetVmConfigSpec().Property, 6)
	})

	t.Run("disk reads back", func(t *testing.T) {
		qemuImg, err := exec.LookPath("qemu-img")
		require.NoError(t, err, "qemu-img not found: run make deps")
		dir := t.TempDir()
		file, back := filepath.Join(dir, name+".vmdk"), filepath.Join(dir, "back.raw")
		require.NoError(t, os.WriteFile(file, members[2].data, 0o644))
		out, err := exec.Command(qemuImg, "check", "-f", "vmdk", file).CombinedOutput()
		require.NoError(t, err, "qemu-img check:\n%s", out)
		out, err = exec.Command(qemuImg, "convert", "-f", "vmdk", "-O", "raw", file, back).CombinedOutput()
		require.NoError(t, err, "qemu-img convert:\n%s", out)
		got, err := os.ReadFile(back)
		require.NoError(t, err)
		require.True(t, bytes.Equal(raw, got), "the OVA's disk reads back other bytes than the raw image")
	})

	t.Run("golden descriptor", func(t *testing.T) {
		golden := filepath.Join("testdata", name+".ovf")
		if *update {
			require.NoError(t, os.WriteFile(golden, members[0].data, 0o644))
		}
		want, err := os.ReadFile(golden)
		require.NoError(t, err, "run go test -update to create it")
		assert.Equal(t, string(want), string(members[0].data))
	})
}

func TestOVAReproducible(t *testing.T) {
	raw := rawDisk()
	first, _ := build(t, raw, ova.WithModTime(epoch))
	again, _ := build(t, raw, ova.WithModTime(epoch))
	require.True(t, bytes.Equal(first, again), "two OVAs of the same disk differ")
}

func TestHardwareVersions(t *testing.T) {
	raw := make([]byte, 1<<20)
	for _, v := range []int{13, 14, 15, 17, 18, 19, 20, 21, 22} {
		t.Run(fmt.Sprintf("vmx-%d", v), func(t *testing.T) {
			require.NoError(t, ova.CheckHardwareVersion(v))
			data, _ := build(t, raw, ova.WithHardwareVersion(v))
			env, err := ovf.Unmarshal(bytes.NewReader(readTar(t, data)[0].data))
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("vmx-%d", v), *env.VirtualSystem.VirtualHardware[0].System.VirtualSystemType)
		})
	}
	for _, v := range []int{-1, 0, 4, 11, 12, 16, 23, 99} {
		t.Run(fmt.Sprintf("refused %d", v), func(t *testing.T) {
			err := ova.CheckHardwareVersion(v)
			require.ErrorIs(t, err, ova.ErrHardwareVersion)
			assert.Contains(t, err.Error(), "13 (ESXi 6.5)")
			err = ova.Write(context.Background(), io.Discard, name, ova.Disk{Content: bytes.NewReader(raw), Size: 1, Capacity: 1}, ova.WithHardwareVersion(v))
			require.ErrorIs(t, err, ova.ErrHardwareVersion)
		})
	}
}

var errBroken = errors.New("broken")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errBroken }

type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errBroken }

func TestWriteErrors(t *testing.T) {
	content := bytes.NewReader(make([]byte, 4096))
	good := ova.Disk{Content: content, Size: 4096, Capacity: 1 << 20}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		w    io.Writer
		app  string
		disk ova.Disk
		opts []ova.Option
		want error
		says string
	}{
		{name: "empty name", app: "", disk: good, want: ova.ErrName},
		{name: "name with a slash", app: "a/b", disk: good, want: ova.ErrName},
		{name: "name too long", app: string(bytes.Repeat([]byte("a"), 64)), disk: good, want: ova.ErrName},
		{name: "no content", app: name, disk: ova.Disk{Size: 1, Capacity: 1}, want: ova.ErrDisk},
		{name: "no capacity", app: name, disk: ova.Disk{Content: content, Size: 4096}, want: ova.ErrDisk},
		{name: "too large for ustar", app: name, disk: ova.Disk{Content: content, Size: 1 << 33, Capacity: 1}, want: ova.ErrTooLarge},
		{name: "short content", app: name, disk: ova.Disk{Content: content, Size: 8192, Capacity: 1}, want: io.ErrUnexpectedEOF, says: "hash the disk"},
		{name: "unreadable content", app: name, disk: ova.Disk{Content: failingReader{}, Size: 8192, Capacity: 1}, want: errBroken},
		{name: "write fails", app: name, disk: good, w: failingWriter{}, want: errBroken, says: "terrarium.ovf"},
		{name: "canceled", app: name, disk: good, ctx: canceled, want: context.Canceled},
		{name: "no CPUs", app: name, disk: good, opts: []ova.Option{ova.WithCPUs(0)}, want: ova.ErrOption},
		{name: "odd memory", app: name, disk: good, opts: []ova.Option{ova.WithMemoryMiB(4097)}, want: ova.ErrOption},
		{name: "time before 1970", app: name, disk: good, opts: []ova.Option{ova.WithModTime(time.Unix(-1, 0))}, want: ova.ErrOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, w := tt.ctx, tt.w
			if ctx == nil {
				ctx = context.Background()
			}
			if w == nil {
				w = io.Discard
			}
			err := ova.Write(ctx, w, tt.app, tt.disk, tt.opts...)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.says)
		})
	}
}
