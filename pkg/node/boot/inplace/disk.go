package inplace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/slotindex"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotinstall"
)

// Disk compares the running slot with a staged one on this machine and
// switches the node's Kubernetes to the staged slot's.
type Disk struct {
	// Path maps a path of the node to where it is (host.Host.Path).
	Path func(string) string
	// ESP is the node's EFI system partition, read for what boots the
	// running slot.
	ESP slotinstall.ESP
	// ByPartLabel is where partitions' links are, by label.
	ByPartLabel string
	// MountDir is where the staged slot is mounted (layout.InPlaceSlotDir)
	// and Marker the file that names it (layout.RunInPlaceSlot).
	MountDir, Marker string
	// Mount mounts a slot read-only with its programs runnable
	// (slotmount.MountExecutable).
	Mount func(ctx context.Context, byPartLabel string, slot layout.Slot, mnt string) (unmount func(), err error)
	// Bind binds the file src over dst (a bind mount).
	Bind func(src, dst string) error
	// Registry is the node's registry on loopback (mirrors.Loopback).
	Registry string
	// Mounted says whether a directory is a mount point; nil: whether
	// its device differs from its parent's.
	Mounted func(dir string) (bool, error)
}

func (d *Disk) mounted(dir string) (bool, error) {
	if d.Mounted != nil {
		return d.Mounted(dir)
	}
	return isMountPoint(dir)
}

// servedWait bounds Served's wait, and servedEvery paces its looks.
const (
	servedWait  = 2 * time.Minute
	servedEvery = 500 * time.Millisecond
)

// Served waits until the node's registry serves ref, an image of the
// slot Switch named to it.
func (d *Disk) Served(ctx context.Context, ref string) error {
	ctx, cancel := context.WithTimeout(ctx, servedWait)
	defer cancel()
	return WaitServed(ctx, d.Registry, ref, servedEvery)
}

// BindMount is Disk.Bind on Linux: a read-only bind mount of src over dst.
func BindMount(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind " + src + " over", Path: dst, Err: err}
	}
	// A bind takes its flags only on a remount.
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return &os.PathError{Op: "remount read-only", Path: dst, Err: err}
	}
	return nil
}

// Decide compares the running slot (running, its release rel) with the
// upgrade staged in slot staged, whose verified manifest is m.
func (d *Disk) Decide(ctx context.Context, running layout.Slot, rel release.Release, staged layout.Slot, m upgrade.Manifest) (Decision, error) {
	cur := Slot{Release: rel}
	var err error
	if cur.Index, err = slotindex.Load(d.Path(layout.SlotIndexFile)); errors.Is(err, os.ErrNotExist) {
		return Decision{Reason: noIndex}, nil
	} else if err != nil {
		return Decision{}, err
	}
	if cur.Boot, err = d.runningBoot(running); err != nil {
		return Decision{}, err
	}
	if cur.Boot[upgrade.RoleUKIA] != "" || cur.Boot[upgrade.RoleUKIB] != "" {
		return Decision{Reason: "this node boots a signed UKI, which carries its release's version, so every upgrade boots a new one"}, nil
	}
	next := Slot{Boot: manifestBoot(m)}
	if !maps.Equal(cur.Boot, next.Boot) {
		return Decide(cur, next), nil
	}
	if a := d.Named(); a != "" {
		return Decision{}, fmt.Errorf("this boot runs slot %s's Kubernetes in place already", a)
	}
	mnt := d.Path(d.MountDir)
	unmount, err := d.Mount(ctx, d.ByPartLabel, staged, mnt)
	if err != nil {
		return Decision{}, fmt.Errorf("mount the staged slot %s: %w", staged, err)
	}
	defer unmount()
	if next.Index, err = slotindex.Load(filepath.Join(mnt, layout.SlotIndexFile)); errors.Is(err, os.ErrNotExist) {
		return Decision{Reason: noIndex}, nil
	} else if err != nil {
		return Decision{}, err
	}
	nrel, err := release.Load(filepath.Join(mnt, layout.ReleaseFile))
	if err != nil {
		return Decision{}, err
	}
	next.Release = *nrel
	return Decide(cur, next), nil
}

// runningBoot hashes what boots the running slot on the ESP: its kernel
// and initramfs, or its UKI.
func (d *Disk) runningBoot(slot layout.Slot) (map[upgrade.Role]string, error) {
	boot := map[upgrade.Role]string{}
	uki := upgrade.RoleUKIA
	if slot == layout.SlotB {
		uki = upgrade.RoleUKIB
	}
	err := d.ESP.WithESP(false, func(dir string) error {
		for role, p := range map[upgrade.Role]string{
			upgrade.RoleKernel: slot.KernelPath(), upgrade.RoleInitramfs: slot.InitrdPath(), uki: slot.UKIPath(),
		} {
			sum, err := slotindex.FileSHA256(filepath.Join(dir, filepath.FromSlash(p)))
			if errors.Is(err, os.ErrNotExist) {
				continue
			} else if err != nil {
				return err
			}
			boot[role] = sum
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("what boots slot %s on the ESP: %w", slot, err)
	}
	return boot, nil
}

// manifestBoot is the kernel and the initramfs an upgrade's slot boots
// on a node that boots no UKI.
func manifestBoot(m upgrade.Manifest) map[upgrade.Role]string {
	boot := map[upgrade.Role]string{}
	for _, p := range m.Parts {
		switch p.Role {
		case upgrade.RoleKernel, upgrade.RoleInitramfs:
			boot[p.Role] = p.SHA256
		}
	}
	return boot
}

// Active names the slot whose Kubernetes this boot runs in place: the
// one Marker names, mounted at MountDir; "" none.
func (d *Disk) Active() layout.Slot {
	s := d.Named()
	if s == "" {
		return ""
	}
	if mounted, err := d.mounted(d.Path(d.MountDir)); err != nil || !mounted {
		return ""
	}
	return s
}

// Named is the slot Marker names ("" none, or no slot): the slot whose
// Kubernetes this boot runs in place, or began to switch to (Switch
// writes the marker first). Either way that slot boots at the next
// reboot, and nothing writes it before.
func (d *Disk) Named() layout.Slot {
	b, err := os.ReadFile(d.Path(d.Marker))
	if err != nil {
		return ""
	}
	if s := layout.Slot(strings.TrimSpace(string(b))); s.Valid() {
		return s
	}
	return ""
}

// Switch makes the node run the Kubernetes of the staged slot, which
// Decide said changes nothing else: Marker written, which has the
// registry serve the slot's bundle too, the slot mounted at MountDir, and
// its Programs bound over the running slot's (an unchanged one too: the
// same bytes). Nothing restarts: the kubelet runs the new program once it
// is restarted (the Kubernetes upgrade does). Switch is idempotent, and
// what it did lasts until the next boot.
func (d *Disk) Switch(ctx context.Context, staged layout.Slot) error {
	if a := d.Named(); a != "" && a != staged {
		return fmt.Errorf("this boot runs slot %s's Kubernetes in place already", a)
	}
	// The marker first: a switch cut short is still seen (Named), and the
	// slot it mounted is never written before the next boot.
	if err := atomicfile.WriteFile(d.Path(d.Marker), []byte(string(staged)+"\n"), 0o644); err != nil {
		return fmt.Errorf("name slot %s: %w", staged, err)
	}
	mnt := d.Path(d.MountDir)
	mounted, err := d.mounted(mnt)
	if err != nil {
		return err
	}
	if !mounted {
		// Kept mounted until the next boot: the bound programs are its.
		if _, err := d.Mount(ctx, d.ByPartLabel, staged, mnt); err != nil {
			return fmt.Errorf("mount the staged slot %s: %w", staged, err)
		}
	}
	for _, p := range Programs {
		src, dst := filepath.Join(mnt, p), d.Path(p)
		if same, err := sameFile(src, dst); err != nil {
			return err
		} else if same {
			continue
		}
		if err := d.Bind(src, dst); err != nil {
			return err
		}
	}
	return nil
}

// isMountPoint reports whether dir exists and is a mount point.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); errors.Is(err, unix.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, &os.PathError{Op: "stat", Path: filepath.Dir(dir), Err: err}
	}
	return st.Dev != parent.Dev, nil
}

// sameFile reports whether a and b are one file (a bound over b).
func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// WaitServed waits until the registry at addr (loopback, plain HTTP)
// serves ref's manifest, as containerd asks its mirror for it: the
// registry looks at Marker every few seconds, and a static pod changed
// before it serves the slot's images would back off its pulls for
// minutes.
func WaitServed(ctx context.Context, addr, ref string, every time.Duration) error {
	host, rest, ok := strings.Cut(ref, "/")
	repo, tag, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return fmt.Errorf("%q is not a host/repository:tag reference", ref)
	}
	url := fmt.Sprintf("http://%s/v2/%s/manifests/%s?ns=%s", addr, repo, tag, host)
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json")
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close() // a HEAD has none
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the registry at %s does not serve %s yet: %w", addr, ref, ctx.Err())
		case <-time.After(every):
		}
	}
}

// Service runs Disk.Switch in the host's mount namespace, through a
// systemd unit (terrarium-in-place@SLOT.service runs `firstboot in-place
// SLOT`): firstboot's own mounts are private to its service, and the
// kubelet, which systemd starts, must run the bound programs.
type Service struct {
	*Disk
	// Start starts a unit and waits for it (systemctl start).
	Start func(ctx context.Context, unit string) error
}

// Unit is the unit that switches to slot.
func Unit(slot layout.Slot) string { return "terrarium-in-place@" + string(slot) + ".service" }

// Switch has the unit switch the node to the staged slot's Kubernetes,
// and checks that its mounts show here.
func (s *Service) Switch(ctx context.Context, staged layout.Slot) error {
	if err := s.Start(ctx, Unit(staged)); err != nil {
		return fmt.Errorf("start %s: %w", Unit(staged), err)
	}
	if a := s.Active(); a != staged {
		return fmt.Errorf("%s ran, but slot %s is not mounted at %s with %s naming it", Unit(staged), staged, s.MountDir, s.Marker)
	}
	for _, p := range Programs {
		same, err := sameFile(filepath.Join(s.Path(s.MountDir), p), s.Path(p))
		if err != nil {
			return fmt.Errorf("%s ran, but %s: %w", Unit(staged), p, err)
		}
		if !same {
			return fmt.Errorf("%s ran, but %s is not slot %s's", Unit(staged), p, staged)
		}
	}
	return nil
}
