package vmdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const MiB = 1 << 20

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s not found: run make deps (scripts/deps.sh installs it)", name)
	return p
}

// syntheticDisk returns size bytes of regions of random bytes, zeros,
// compressible text and lone non-zero bytes in zeros, the same for the
// same seed.
func syntheticDisk(size int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, size)
	for off := 0; off < size; {
		n := min(1+rng.IntN(300<<10), size-off)
		region := b[off : off+n]
		switch rng.IntN(4) {
		case 0:
			for i := range region {
				region[i] = byte(rng.Uint32())
			}
		case 1: // zeros
		case 2:
			for i := range region {
				region[i] = "terrarium appliance "[i%20]
			}
		case 3:
			region[rng.IntN(n)] = 0xff
		}
		off += n
	}
	return b
}

func write(t *testing.T, raw []byte, opts ...Option) ([]byte, Stats) {
	t.Helper()
	var out bytes.Buffer
	st, err := Write(context.Background(), &out, bytes.NewReader(raw), int64(len(raw)), opts...)
	require.NoError(t, err)
	return out.Bytes(), st
}

// TestQEMUReadsVMDK has qemu-img check the VMDK, identify it as
// streamOptimized and convert it back to the raw image, byte for byte.
func TestQEMUReadsVMDK(t *testing.T) {
	qemuImg := requireTool(t, "qemu-img")
	tests := []struct {
		name string
		raw  []byte
	}{
		{"grain aligned", syntheticDisk(4*MiB, 1)},
		{"not grain aligned", syntheticDisk(3*MiB+7*SectorSize, 2)},
		{"two grain tables, one-sector last grain", syntheticDisk(33*MiB+SectorSize, 3)},
		{"one sector", syntheticDisk(SectorSize, 4)},
		{"all zeros", make([]byte, 5*MiB)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "disk.vmdk")
			data, st := write(t, tt.raw)
			require.NoError(t, os.WriteFile(file, data, 0o644))

			out, err := exec.Command(qemuImg, "check", "-f", "vmdk", file).CombinedOutput()
			require.NoError(t, err, "qemu-img check:\n%s", out)
			assert.Contains(t, string(out), "No errors were found")

			out, err = exec.Command(qemuImg, "info", "--output=json", "-f", "vmdk", file).Output()
			require.NoError(t, err, "qemu-img info")
			var info struct {
				Format         string `json:"format"`
				VirtualSize    int64  `json:"virtual-size"`
				FormatSpecific struct {
					Data struct {
						CreateType string `json:"create-type"`
						Extents    []struct {
							Compressed  bool  `json:"compressed"`
							ClusterSize int64 `json:"cluster-size"`
						} `json:"extents"`
					} `json:"data"`
				} `json:"format-specific"`
			}
			require.NoError(t, json.Unmarshal(out, &info), "%s", out)
			assert.Equal(t, "vmdk", info.Format)
			assert.Equal(t, int64(len(tt.raw)), info.VirtualSize)
			assert.Equal(t, "streamOptimized", info.FormatSpecific.Data.CreateType)
			require.Len(t, info.FormatSpecific.Data.Extents, 1)
			assert.True(t, info.FormatSpecific.Data.Extents[0].Compressed)
			assert.Equal(t, int64(grainBytes), info.FormatSpecific.Data.Extents[0].ClusterSize)

			back := filepath.Join(dir, "back.raw")
			out, err = exec.Command(qemuImg, "convert", "-f", "vmdk", "-O", "raw", file, back).CombinedOutput()
			require.NoError(t, err, "qemu-img convert:\n%s", out)
			got, err := os.ReadFile(back)
			require.NoError(t, err)
			require.Equal(t, len(tt.raw), len(got), "size of the raw image qemu-img read back")
			require.True(t, bytes.Equal(tt.raw, got), "qemu-img read back other bytes than were written")

			p, err := readVMDK(data, 64*MiB)
			require.NoError(t, err)
			require.True(t, bytes.Equal(tt.raw, p.raw), "the test reader read back other bytes")
			assert.Equal(t, int64(len(data)), st.Size)
		})
	}
}

func TestWriteReproducible(t *testing.T) {
	raw := syntheticDisk(6*MiB+3*SectorSize, 5)
	first, _ := write(t, raw)
	again, _ := write(t, raw)
	require.True(t, bytes.Equal(first, again), "two writes of the same image differ")
	for _, n := range []int{1, 3, 16} {
		other, _ := write(t, raw, WithConcurrency(n))
		require.True(t, bytes.Equal(first, other), "concurrency %d changes the output", n)
	}

	changed := bytes.Clone(raw)
	changed[len(changed)-1] ^= 1
	p1, err := readVMDK(first, 64*MiB)
	require.NoError(t, err)
	data, _ := write(t, changed)
	p2, err := readVMDK(data, 64*MiB)
	require.NoError(t, err)
	assert.NotEqual(t, cidLine(p1.descriptor), cidLine(p2.descriptor), "one changed byte must change the CID")
}

func cidLine(desc string) string {
	for line := range strings.Lines(desc) {
		if strings.HasPrefix(line, "CID=") {
			return line
		}
	}
	return ""
}

func TestWriteStats(t *testing.T) {
	raw := make([]byte, 40*MiB+SectorSize)
	copy(raw[MiB+100:], "x")                           // grain 16
	copy(raw[35*MiB:], bytes.Repeat([]byte{1}, 70000)) // grains 560 and 561, in the second table
	copy(raw[40*MiB:], "last")                         // the one-sector last grain
	data, st := write(t, raw)
	assert.Equal(t, int64(len(raw)), st.Capacity)
	assert.Equal(t, int64(len(data)), st.Size)
	assert.Equal(t, int64(3*grainBytes+SectorSize), st.Populated)
	p, err := readVMDK(data, 64*MiB)
	require.NoError(t, err)
	assert.Equal(t, 4, p.grains)
	assert.True(t, bytes.Equal(raw, p.raw))
}

func TestWriteHeaderAndDescriptor(t *testing.T) {
	raw := syntheticDisk(MiB, 6)
	data, _ := write(t, raw, WithExtentName("terrarium.vmdk"))
	p, err := readVMDK(data, 64*MiB)
	require.NoError(t, err)
	assert.Equal(t, uint64(len(raw)/SectorSize), p.header.Capacity)
	assert.Equal(t, uint64(gdAtEnd), p.header.GDOffset)
	assert.Equal(t, uint64(overheadSectors), p.header.Overhead)
	assert.Equal(t, uint32(0x30001), p.header.Flags, "newline test, compressed grains and markers, no redundant GD")
	assert.Equal(t, "KDMV", string(data[:4]))

	golden := filepath.Join("testdata", "descriptor.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(p.descriptor), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -update to create it")
	assert.Equal(t, string(want), p.descriptor)
}

func TestGeometry(t *testing.T) {
	tests := []struct {
		adapter  Adapter
		capacity uint64
		c, h, s  uint64
	}{
		{AdapterLSILogic, 255 * 63, 1, 255, 63},
		{AdapterLSILogic, 255*63 + 1, 2, 255, 63},
		{AdapterBusLogic, 8 << 21, 1045, 255, 63},
		{AdapterLSILogic, 1 << 40, 65535, 255, 63},
		{AdapterIDE, 16 * 63 * 10, 10, 16, 63},
		{AdapterIDE, 1 << 40, 16383, 16, 63},
	}
	for _, tt := range tests {
		c, h, s := tt.adapter.geometry(tt.capacity)
		assert.Equal(t, [3]uint64{tt.c, tt.h, tt.s}, [3]uint64{c, h, s}, "%s, %d sectors", tt.adapter, tt.capacity)
	}
	data, _ := write(t, make([]byte, MiB), WithAdapter(AdapterIDE))
	p, err := readVMDK(data, MiB)
	require.NoError(t, err)
	assert.Contains(t, p.descriptor, "ddb.adapterType = \"ide\"\nddb.geometry.cylinders = \"3\"\nddb.geometry.heads = \"16\"\n")
}

func TestWriteProgress(t *testing.T) {
	raw := make([]byte, 70*MiB)
	var calls [][2]int64
	write(t, raw, WithProgress(func(done, total int64) { calls = append(calls, [2]int64{done, total}) }))
	assert.Equal(t, [][2]int64{{32 * MiB, 70 * MiB}, {64 * MiB, 70 * MiB}, {70 * MiB, 70 * MiB}}, calls)
}

// failingReader fails reads at or past byte at.
type failingReader struct {
	r  io.ReaderAt
	at int64
}

var errDisk = errors.New("disk on fire")

func (f failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.at {
		return 0, errDisk
	}
	return f.r.ReadAt(p, off)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestWriteErrors(t *testing.T) {
	raw := make([]byte, 2*MiB)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		w    io.Writer
		r    io.ReaderAt
		size int64
		opts []Option
		want error
		says string
	}{
		{name: "empty", size: 0, want: ErrSize},
		{name: "not whole sectors", size: 1000, want: ErrSize, says: "1000 bytes"},
		{name: "short input", size: 3 * MiB, want: io.ErrUnexpectedEOF, says: "read the raw image"},
		{name: "read fails", r: failingReader{bytes.NewReader(raw), MiB}, want: errDisk, says: "derive content ID"},
		{name: "write fails", w: failingWriter{}, want: errDisk, says: "write VMDK"},
		{name: "canceled", ctx: canceled, want: context.Canceled},
		{name: "bad adapter", opts: []Option{WithAdapter("scsi")}, want: ErrOption, says: `"scsi"`},
		{name: "bad extent name", opts: []Option{WithExtentName(`a"b`)}, want: ErrOption},
		{name: "extent name with slash", opts: []Option{WithExtentName("dir/disk.vmdk")}, want: ErrOption},
		{name: "no workers", opts: []Option{WithConcurrency(0)}, want: ErrOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, w, r, size := tt.ctx, tt.w, tt.r, tt.size
			if ctx == nil {
				ctx = context.Background()
			}
			if w == nil {
				w = io.Discard
			}
			if r == nil {
				r = bytes.NewReader(raw)
			}
			if size == 0 && !errors.Is(tt.want, ErrSize) {
				size = int64(len(raw))
			}
			_, err := Write(ctx, w, r, size, tt.opts...)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.says)
		})
	}
}

// BenchmarkWrite measures the writer on a disk of mixed regions; b.SetBytes
// makes the result a throughput of the raw image.
func BenchmarkWrite(b *testing.B) {
	raw := syntheticDisk(64*MiB, 7)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Write(context.Background(), io.Discard, bytes.NewReader(raw), int64(len(raw))); err != nil {
			b.Fatal(err)
		}
	}
}
