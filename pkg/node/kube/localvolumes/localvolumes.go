// Package localvolumes keeps a cluster node's volume area: where the
// local-path StorageClass puts the volumes of the pods the node runs
// (layout.LocalVolumesDir). By default the area is an ext4 filesystem in a
// file on TERRA-STATE, allocated whole when the node first makes it, so
// the volumes can never take the room etcd, the images and the logs need,
// nor they the volumes': a full volume area fills only itself. A node's
// config may instead make a whole second disk the area
// (cluster.localStorage.disk). The image's mount unit
// (layout.LocalVolumesUnit: nodev, nosuid; a drop-in turns it to the disk)
// mounts it on every boot before the kubelet may start a pod on it; its
// root's marker (layout.LocalVolumesMarker) tells the volume helper that
// it is.
package localvolumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/boot/installer"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// Area is a node's volume area on a host.
type Area struct {
	Host *host.Host
	// FS reports TERRA-STATE's room, and whether the area's directory is
	// a mount point (on another file system than its parent); nil is the
	// running kernel's (diskspace.Statfs).
	FS diskspace.FS
	// Say tells the node's log what the area decided.
	Say func(format string, args ...any)
	// Disks lists the machine's disks and those holding Terrarium, for a
	// disk area; nil: the kernel's (installer.List, installer.Installed).
	Disks func() (disks []installer.Disk, terrarium map[string]bool, err error)
}

// Spec is what the node's config asks of its area.
type Spec struct {
	// Size is the size of an area on TERRA-STATE (0: the default), and
	// Keep what it leaves free there (see Plan).
	Size, Keep int64
	// Disk makes the disk it selects the area instead; nil: TERRA-STATE.
	Disk *machineconfig.DiskSelector
}

// newSuffix names the area's file while it is made: a power cut leaves
// that, never a half-made area under the real name.
const newSuffix = ".new"

// Result is what Ensure found or did.
type Result struct {
	// Size is the area's file size; 0 when the node has no area.
	Size int64
	// Made is set when this call made the area.
	Made bool
	// Skipped says why the node has no area.
	Skipped string
	// Disk is the disk the area is, for a disk area ("" on TERRA-STATE).
	Disk string
	// Encrypted is set for a disk area that is a LUKS2 volume (crypt.go).
	Encrypted bool
}

// Ensure makes the area if the node has none (spec's), mounts it if it is
// not, and marks its root. Every step checks before it acts: run again
// after a power cut, it finishes the job. An area the node has already is
// kept as it is, whatever spec says now.
func (a *Area) Ensure(ctx context.Context, spec Spec) (Result, error) {
	size, keep := spec.Size, spec.Keep
	dir, img := a.Host.Path(layout.LocalVolumesDir), a.Host.Path(layout.LocalVolumesImage)
	mounted, err := a.mounted(dir)
	if err != nil {
		return Result{}, err
	}
	_, imgErr := os.Stat(img)
	hasFile := imgErr == nil
	if spec.Disk != nil && hasFile {
		a.say("volume area: %s on TERRA-STATE is the area; %s applies only to a new area (an area is never moved)", layout.LocalVolumesImage, diskField)
	}
	if mounted {
		res := Result{Size: fileSize(img)}
		return res, a.mark(dir)
	}
	if !hasFile && (spec.Disk != nil || a.onDisk()) {
		if spec.Disk == nil {
			return Result{}, fmt.Errorf("volume area: the area is a disk (%s), and the config no longer selects one: put %s back", layout.LocalVolumesDiskDropIn, diskField)
		}
		res, err := a.ensureDisk(ctx, *spec.Disk)
		if err != nil {
			return Result{}, err
		}
		return res, a.mark(dir)
	}
	var res Result
	st, err := os.Stat(img)
	switch {
	case err == nil:
		res.Size = st.Size()
		if size > 0 && size != st.Size() {
			a.say("volume area: %s is %s; the config's %s applies only to a new area (the area is never resized)",
				layout.LocalVolumesImage, human(st.Size()), human(size))
		}
	case errors.Is(err, fs.ErrNotExist):
		n, why, err := a.plan(size, keep)
		if err != nil {
			return Result{}, err
		}
		if n == 0 {
			a.say("volume area: none: %s", why)
			return Result{Skipped: why}, nil
		}
		if why != "" {
			a.say("volume area: %s", why)
		}
		if err := a.make(ctx, img, n); err != nil {
			return Result{}, err
		}
		res = Result{Size: n, Made: true}
	default:
		return Result{}, fmt.Errorf("volume area: %w", err)
	}
	if _, err := os.Stat(a.Host.Path("/sys/module/loop")); err != nil {
		if err := a.Host.Run(ctx, "modprobe", "loop"); err != nil {
			return Result{}, fmt.Errorf("volume area: %w", err)
		}
	}
	if err := a.start(ctx); err != nil {
		return Result{}, err
	}
	return res, a.mark(dir)
}

// start has systemd mount the area, in the host's namespace (firstboot's
// mounts are its own), as it does on every later boot before the kubelet.
func (a *Area) start(ctx context.Context) error {
	if err := a.Host.Run(ctx, "systemctl", "start", layout.LocalVolumesUnit); err != nil {
		return fmt.Errorf("mount the volume area: %w", err)
	}
	if mounted, err := a.mounted(a.Host.Path(layout.LocalVolumesDir)); err != nil {
		return err
	} else if !mounted {
		return fmt.Errorf("mount the volume area: %s started, but %s is not a mount point", layout.LocalVolumesUnit, layout.LocalVolumesDir)
	}
	return nil
}

// Check says whether the area is mounted and marked, without changing
// anything; a node without an area (Ensure skipped it) passes.
func (a *Area) Check() error {
	dir, img := a.Host.Path(layout.LocalVolumesDir), a.Host.Path(layout.LocalVolumesImage)
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) && !a.onDisk() {
		return nil
	}
	mounted, err := a.mounted(dir)
	if err != nil {
		return err
	}
	if !mounted {
		what := layout.LocalVolumesImage
		if a.onDisk() {
			what = "disk (" + layout.LocalVolumesDiskDropIn + ")"
		}
		return fmt.Errorf("the volume area %s is not mounted on %s", what, layout.LocalVolumesDir)
	}
	if _, err := os.Stat(filepath.Join(dir, layout.LocalVolumesMarker)); err != nil {
		return fmt.Errorf("the volume area on %s has no %s", layout.LocalVolumesDir, layout.LocalVolumesMarker)
	}
	return nil
}

// plan is the size of a new area: the config's, or a quarter of
// TERRA-STATE, never leaving less than the reserve free; 0 and why when
// there is no room for one.
func (a *Area) plan(size, keep int64) (int64, string, error) {
	sp, err := diskspace.OrStatfs(a.FS).Space(a.Host.Path(filepath.Dir(layout.LocalVolumesImage)))
	if err != nil {
		return 0, "", fmt.Errorf("volume area: the room on TERRA-STATE: %w", err)
	}
	n, why := Plan(size, keep, int64(sp.Total), int64(sp.Avail)) //nolint:gosec // a file system's size fits

	return n, why, nil
}

// Plan sizes a new area from the config's size (0: the default, a quarter
// of TERRA-STATE's total), what it must leave free (keep) and TERRA-STATE's
// total and free bytes, rounded down to MiB; 0 and why when that is below
// machineconfig.MinLocalVolumesSize. A shortened area says why too.
func Plan(size, keep, total, free int64) (int64, string) {
	const mibMask = 1<<20 - 1
	want := size
	if want == 0 {
		want = total / 4
	}
	want &^= mibMask
	n := min(want, free-keep) &^ mibMask
	if n < machineconfig.MinLocalVolumesSize {
		return 0, fmt.Sprintf("TERRA-STATE has %s free and keeps %s for etcd, upgrades, images and logs (state.reserveMiB and 1 GiB): no room for a volume area of at least %s (give the node a larger disk)",
			human(free), human(keep), human(machineconfig.MinLocalVolumesSize))
	}
	if n < want {
		return n, fmt.Sprintf("%s asked, %s made: TERRA-STATE has %s free and keeps %s for etcd, upgrades, images and logs (state.reserveMiB and 1 GiB)",
			human(want), human(n), human(free), human(keep))
	}
	return n, ""
}

// make allocates the area's file whole and makes its filesystem under a
// temporary name, then gives it its name.
func (a *Area) make(ctx context.Context, img string, size int64) error {
	tmp := img + newSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume area: drop a half-made area: %w", err)
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("volume area: %w", err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		// The allocation's error is what to report; the half file goes.
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("volume area: allocate %s on TERRA-STATE: %w", human(size), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("volume area: %w", err)
	}
	// No reserved blocks (nothing of root's lives there), no lazy
	// initialization left running in the background of a new node.
	if err := a.Host.Run(ctx, "mkfs.ext4", "-q", "-F", "-L", layout.LabelVolumesFS, "-m", "0",
		"-E", "lazy_itable_init=0,lazy_journal_init=0", layout.LocalVolumesImage+newSuffix); err != nil {
		return fmt.Errorf("volume area: make its filesystem: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("volume area: %w", err)
	}
	if err := os.Rename(tmp, img); err != nil {
		return fmt.Errorf("volume area: %w", err)
	}
	if err := syncFile(filepath.Dir(img)); err != nil {
		return fmt.Errorf("volume area: %w", err)
	}
	a.say("volume area: made %s (%s) on TERRA-STATE", layout.LocalVolumesImage, human(size))
	return nil
}

// mark writes the marker at the root of the mounted area.
func (a *Area) mark(dir string) error {
	m := filepath.Join(dir, layout.LocalVolumesMarker)
	if _, err := os.Stat(m); err == nil {
		return nil
	}
	if err := os.WriteFile(m, []byte("the node's volume area (Terrarium): volumes live in pvc-* beside this file\n"), 0o644); err != nil {
		return fmt.Errorf("volume area: mark it: %w", err)
	}
	// The volume helper runs as root; pods reach their own volume only.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("volume area: %w", err)
	}
	return nil
}

// mounted says whether dir is a mount point: on another file system than
// its parent. A missing dir is not.
func (a *Area) mounted(dir string) (bool, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	same, err := diskspace.SameFS(diskspace.OrStatfs(a.FS), dir, filepath.Dir(dir))
	if err != nil {
		return false, fmt.Errorf("volume area: %w", err)
	}
	return !same, nil
}

func (a *Area) say(format string, args ...any) {
	if a.Say != nil {
		a.Say(format, args...)
	}
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// human writes a byte count for a person.
func human(n int64) string { return diskspace.Size(uint64(n)) } //nolint:gosec // sizes here are positive
