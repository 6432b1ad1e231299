// Package squashfs makes slot images with mksquashfs (go-diskfs' squashfs
// writer produces images unsquashfs cannot read). Output is reproducible:
// fixed times, sorted directories, root-owned as in the source tree.
package squashfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
)

// BlockSize is the squashfs block: mksquashfs's default. A read of any
// page decompresses its whole block, and a booting node reads many small
// files and scattered pages of its programs: 1 MiB blocks made seeding
// /var at a first boot under TCG take 4.4 to 5.9 s against 1.7 to 2.9 s,
// for an image no smaller (docs/benchmarks.md).
const BlockSize = "128K"

// Compression is a compressor both mksquashfs and the node's kernel
// (CONFIG_SQUASHFS_LZ4, CONFIG_SQUASHFS_ZSTD) know.
type Compression string

const (
	// LZ4 in its high-compression mode compresses the slots. A booting
	// node pages in hundreds of megabytes of programs (its own, and its
	// containers' from the bundle's unpacked layers), each page through
	// the kernel's decompressor, on a CPU that a node starved under
	// emulation shares with everything else: lz4 cost 0.55 of zstd's
	// kernel time for the same programs, in a squashfs a third bigger
	// (the whole image 17 %; make bench-pagein, docs/benchmarks.md).
	LZ4 Compression = "lz4"
	// ZSTD at level 15 compressed the slots before LZ4: smaller, slower
	// to read. The page-in benchmark's baseline.
	ZSTD Compression = "zstd"
)

// args are mksquashfs's options for c.
func (c Compression) args() ([]string, error) {
	switch c {
	case LZ4:
		return []string{"-comp", "lz4", "-Xhc"}, nil
	case ZSTD:
		return []string{"-comp", "zstd", "-Xcompression-level", "15"}, nil
	default:
		return nil, fmt.Errorf("squashfs compression %q: want %q or %q", c, LZ4, ZSTD)
	}
}

// Make writes a squashfs of dir to out, compressed the way slots are
// (LZ4).
func Make(ctx context.Context, dir, out string, epoch time.Time) error {
	return MakeCompressed(ctx, dir, out, epoch, LZ4)
}

// MakeCompressed writes a squashfs of dir to out, compressed with c.
func MakeCompressed(ctx context.Context, dir, out string, epoch time.Time, c Compression) error {
	comp, err := c.args()
	if err != nil {
		return err
	}
	tmp := out + ".partial"
	_ = os.Remove(tmp) // a leftover of an interrupted run; -noappend overwrites one that stays
	ts := strconv.FormatInt(epoch.Unix(), 10)
	args := append([]string{dir, tmp, "-noappend"}, comp...)
	args = append(args, "-b", BlockSize,
		"-mkfs-time", ts, "-all-time", ts, "-no-progress", "-quiet", "-xattrs")
	cmd := exec.CommandContext(ctx, "mksquashfs", args...)
	// mksquashfs refuses SOURCE_DATE_EPOCH together with the time options.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("mksquashfs %s: %w: %s", dir, err, b)
	}
	return atomicfile.Replace(tmp, out)
}
