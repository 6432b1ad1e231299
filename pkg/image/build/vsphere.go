package build

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/image/ova"
	"github.com/terrarium-os/terrarium/pkg/image/vmdk"
)

// The vSphere outputs as stages that take their inputs and return their
// outputs: the raw image becomes a streamOptimized VMDK, the VMDK an OVA.

// vmdkImage is what the vmdk stage wrote.
type vmdkImage struct {
	path  string
	stats vmdk.Stats
}

// writeVMDK writes the streamOptimized VMDK of the raw image at raw to dst,
// whole or not at all; extent is the name its descriptor gives itself.
// Progress goes to log at debug level, every tenth of the image.
func writeVMDK(ctx context.Context, raw, dst, extent string, log *slog.Logger) (vmdkImage, error) {
	f, err := os.Open(raw)
	if err != nil {
		return vmdkImage{}, fmt.Errorf("open the raw image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return vmdkImage{}, fmt.Errorf("open the raw image: %w", err)
	}
	next := int64(0)
	progress := func(done, total int64) {
		if done >= next {
			log.Debug("vmdk", "done", done, "total", total)
			next = done + total/10
		}
	}
	var st vmdk.Stats
	err = atomicfile.Write(dst, 0o644, func(w io.Writer) error {
		var werr error
		st, werr = vmdk.Write(ctx, w, f, fi.Size(), vmdk.WithExtentName(extent), vmdk.WithProgress(progress))
		return werr
	})
	if err != nil {
		return vmdkImage{}, fmt.Errorf("write the VMDK of %s: %w", raw, err)
	}
	return vmdkImage{path: dst, stats: st}, nil
}

// ovaInputs are what the ova stage reads.
type ovaInputs struct {
	name            string // the VM's name, and the OVA members' base name
	version         string // the image version the descriptor shows
	disk            vmdkImage
	hardwareVersion int
	epoch           time.Time // every member's time
}

// writeOVA writes the OVA of in.disk to dst, whole or not at all.
func writeOVA(ctx context.Context, in ovaInputs, dst string) error {
	f, err := os.Open(in.disk.path)
	if err != nil {
		return fmt.Errorf("open the VMDK: %w", err)
	}
	defer f.Close()
	disk := ova.Disk{Content: f, Size: in.disk.stats.Size, Capacity: in.disk.stats.Capacity, Populated: in.disk.stats.Populated}
	err = atomicfile.Write(dst, 0o644, func(w io.Writer) error {
		return ova.Write(ctx, w, in.name, disk,
			ova.WithHardwareVersion(in.hardwareVersion), ova.WithVersion(in.version), ova.WithModTime(in.epoch))
	})
	if err != nil {
		return fmt.Errorf("write the OVA of %s: %w", in.disk.path, err)
	}
	return nil
}
