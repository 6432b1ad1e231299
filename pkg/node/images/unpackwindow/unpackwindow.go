// Package unpackwindow keeps containerd's image store trustworthy across
// power cuts.
//
// The unpack window spans the part of formation in which containerd
// unpacks images onto STATE: from the start of the kubernetes phase until
// the node is healthy (its static pods, kube-proxy and pod network run, so
// every image it needs is unpacked) and STATE has been synced.
//
// containerd records an unpacked snapshot as committed in its metadata
// (which it syncs) before the files it unpacked reach the disk (which it
// does not sync): a power cut in between leaves images containerd trusts
// with empty or truncated files, and their containers fail with "exec
// format error" for good (containerd/containerd#10457, #5854, #3671).
// Terrarium keeps nothing it cannot vouch for: a boot that finds the window
// still open starts containerd from an empty store (Repair, before
// containerd starts), and the images come again from the slot's bundle
// through the node's registry.
package unpackwindow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// file is the window's record on TERRA-STATE, as the running node sees it:
// this package's own file in firstboot's directory there, its path built
// here only.
const file = layout.StateMount + "/" + layout.StateUnpackWindow

func path(h *host.Host) string { return h.Path(file) }

// Open durably records that containerd may unpack images from
// now on, before it can, with the boot that opened it.
func Open(h *host.Host) error {
	p := path(h)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	return write(h, h.Now())
}

// IsOpen reports whether the window is open (by this boot or one before).
func IsOpen(h *host.Host) (bool, error) {
	_, err := os.Stat(path(h))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("look at the image unpack window: %w", err)
}

func write(h *host.Host, now time.Time) error {
	p := path(h)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	line := fmt.Sprintf("opened %s boot %s\n", now.UTC().Format(time.RFC3339), currentBootID(h))
	// WriteFile syncs the file and its directory: the window is durable.
	if err := atomicfile.WriteFile(p, []byte(line), 0o644); err != nil {
		return fmt.Errorf("open the image unpack window: %w", err)
	}
	return nil
}

// currentBootID is the kernel's id of this boot.
func currentBootID(h *host.Host) string {
	b, _ := os.ReadFile(h.Path("/proc/sys/kernel/random/boot_id"))
	return strings.TrimSpace(string(b))
}

// windowBootID is the boot that opened the window.
func windowBootID(data []byte) string {
	f := strings.Fields(string(data))
	if len(f) == 4 && f[2] == "boot" {
		return f[3]
	}
	return ""
}

// Close makes everything containerd unpacked durable (a sync
// of STATE's whole filesystem), then removes the record. It reports whether
// it closed a window.
//
// It closes only a window of this boot. One a cut boot left open is
// Repair's: whatever closed it before the repair ran would leave the torn
// stores in place.
func Close(h *host.Host) (bool, error) {
	p := path(h)
	window, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("read the image unpack window: %w", err)
	}
	if windowBootID(window) != currentBootID(h) {
		return false, nil
	}
	if err := atomicfile.SyncFS(h.Path(layout.StateMount)); err != nil {
		return true, fmt.Errorf("sync TERRA-STATE before closing the image unpack window: %w", err)
	}
	if err := os.Remove(p); err != nil {
		return true, fmt.Errorf("close the image unpack window: %w", err)
	}
	return true, atomicfile.SyncDir(filepath.Dir(p))
}

// Repair runs before the snapshotter and containerd start
// (terrarium-snapshotter.service's ExecStartPre, `firstboot
// repair-images`). When the last boot was cut inside the unpack window, it
// removes containerd's store and the snapshotter's, which may hold torn
// images, and says so on console; both then start empty. The
// window stays open: the images unpacked again are made durable before it
// closes. It reports whether it removed the store.
//
// The window file names the boot that opened it: containerd restarting
// within that boot (no power cut) keeps its store.
func Repair(h *host.Host, console io.Writer) (bool, error) {
	window, err := os.ReadFile(path(h))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if id := windowBootID(window); id != "" && id == currentBootID(h) {
		return false, nil // containerd restarted within the boot: no power cut
	}
	removed := false
	for _, dir := range stores() {
		store := h.Path(dir)
		if _, err := os.Lstat(store); errors.Is(err, os.ErrNotExist) {
			continue
		}
		_, _ = fmt.Fprintf(console, "terrarium: the last boot ended while containerd was unpacking images (%s is still open); "+
			"removing %s, which may hold torn images: they come again from this slot\n",
			file, dir)
		if err := removeStore(store); err != nil {
			return removed, err
		}
		removed = true
	}
	// The window is this boot's now, also when there was no store to
	// remove (a cut during an earlier repair): containerd restarting later
	// in it keeps what it unpacked since, and Close may close it.
	return removed, write(h, h.Now())
}

// stores are what containerd's images live in: its own store (content,
// metadata) and the node's snapshotter's snapshots.
func stores() []string { return []string{layout.ContainerdRoot, layout.SnapshotterRoot} }

// removeStore removes a store, renamed first, so that a power cut during
// the removal leaves no half store where it is looked for.
func removeStore(store string) error {
	torn := store + ".torn"
	if err := os.RemoveAll(torn); err != nil {
		return fmt.Errorf("remove %s: %w", torn, err)
	}
	if err := os.Rename(store, torn); err != nil {
		return fmt.Errorf("move aside %s: %w", store, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(store)); err != nil {
		return err
	}
	if err := os.RemoveAll(torn); err != nil {
		return fmt.Errorf("remove %s: %w", torn, err)
	}
	return nil
}

// Writers are the units whose processes write containerd's images: while
// either runs, an image may be half unpacked.
func writers() []string { return []string{"containerd.service", "terrarium-snapshotter.service"} }

// CloseAtShutdown closes the window on an orderly shutdown or reboot
// (terrarium-unpack-window.service's ExecStop, `firstboot
// close-unpack-window`), once containerd and the snapshotter have stopped:
// nothing can unpack any more, and what they unpacked is made durable
// before the power goes. Without it, a boot that reboots before it is
// healthy (a failed upgrade trial) would start the next one from an empty
// store, though nothing was cut; a boot that loses its power still keeps
// the window open. While either unit still runs it closes nothing and
// says why. It reports whether it closed an open window.
func CloseAtShutdown(ctx context.Context, h *host.Host, console io.Writer) (bool, error) {
	units := writers()
	args := append([]string{"show", "--property=ActiveState", "--value"}, units...)
	out, err := h.Output(ctx, "systemctl", args...)
	if err != nil {
		return false, fmt.Errorf("ask systemd whether containerd has stopped: %w", err)
	}
	states := strings.Fields(out)
	if len(states) != len(units) {
		return false, fmt.Errorf("systemctl %s: want one state per unit, got %q", strings.Join(args, " "), out)
	}
	for i, s := range states {
		if s != "inactive" && s != "failed" {
			_, _ = fmt.Fprintf(console, "terrarium: %s is %s, so it may still unpack images: the image unpack window stays open\n", units[i], s)
			return false, nil
		}
	}
	closed, err := Close(h)
	if closed && err == nil {
		_, _ = fmt.Fprintf(console, "terrarium: containerd has stopped; what it unpacked this boot is synced to TERRA-STATE and the image unpack window is closed\n")
	}
	return closed, err
}
