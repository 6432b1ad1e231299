package firstboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/efiboot"
	"github.com/terrarium-os/terrarium/pkg/node/boot/installer"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotinstall"
	"github.com/terrarium-os/terrarium/pkg/node/boot/statecrypt"
	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
	"golang.org/x/sys/unix"
)

// liveBoot reports whether the kernel command line in file (/proc/cmdline)
// says this boot runs live from the ISO.
func liveBoot(file string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == layout.CmdlineLive || strings.HasPrefix(f, layout.CmdlineLive+"=") {
			return true
		}
	}
	return false
}

// errLiveUpgrade: a live boot has no slots to write.
var errLiveUpgrade = errors.New("this node runs live from the ISO, which has no slot to write: boot the new version's ISO instead, or install to a disk and upgrade that")

// refuseLive is a live boot's Installer.
func refuseLive(context.Context, *upgrade.Verified, layout.Slot, release.Release, upgrade.Policy, host.Reporter) (slotinstall.Result, error) {
	return slotinstall.Result{}, errLiveUpgrade
}

// installMapperName is the name the installed system's encrypted
// TERRA-STATE is opened as while it is seeded: not the live boot's own.
const installMapperName = "terrarium-install-state"

// formatInstalledState makes the installed system's TERRA-STATE on dev
// as its own first boot would (bootinit): a LUKS2 volume whose key this
// machine's TPM seals against PCR 7 — the same value when the installed
// disk boots, since PCR 7 records the firmware's Secure Boot state, not
// the boot medium — or, without a TPM, a plain one, said so.
func formatInstalledState(ctx context.Context, h *host.Host, dev string, say func(string)) (string, func() error, error) {
	mkfs := func(ctx context.Context, dev string) error {
		return h.Run(ctx, "mkfs.ext4", "-F", "-q", "-L", layout.LabelStateFS, "-E", "lazy_itable_init=1,lazy_journal_init=1", dev)
	}
	tpm, ok, err := tpmseal.Open(h.Path(tpmseal.Device))
	if err != nil {
		return "", nil, err
	}
	if !ok {
		say(fmt.Sprintf("TERRA-STATE %s NOT encrypted: this machine has no TPM 2.0 (docs/state-encryption.md)", dev))
		return dev, nil, mkfs(ctx, dev)
	}
	defer tpm.Close()
	say(fmt.Sprintf("encrypting TERRA-STATE %s (LUKS2, its key sealed to this machine's TPM against the Secure Boot state, PCR 7)", dev))
	fsdev, err := statecrypt.Create(ctx, statecrypt.Volume{Device: dev, Run: statecrypt.Exec{}}, tpm, layout.LabelStateLUKS, installMapperName, mkfs)
	if err != nil {
		return "", nil, err
	}
	return fsdev, func() error {
		return statecrypt.Close(context.WithoutCancel(ctx), statecrypt.Exec{}, installMapperName)
	}, nil
}

// liveDiskInstaller is a live boot's ISOInstaller: the ISO mounted on
// layout.LiveMediumMount onto the disk the config selects, never the
// disk that medium is on.
func liveDiskInstaller(h *host.Host) ISOInstaller {
	return func(ctx context.Context, in machineconfig.Install, seed func(dir string) error, report host.Reporter) (installer.Result, error) {
		say := func(s string) { report.Report("install", step.Progress, s) }
		medium, err := mediumDisk("/proc/self/mounts", "/sys/class/block", layout.LiveMediumMount)
		if err != nil {
			return installer.Result{}, err
		}
		disks, err := installer.List("/sys/class/block", "/dev/disk", "/run/udev/data")
		if err != nil {
			return installer.Result{}, err
		}
		// A USB stick's serial and every disk's by-id and by-path names
		// are udev's, once it has handled the disk. A firstboot started
		// early once read a stick before udev had: "serial unknown", and
		// install.disk selected nothing. Waited for disk by disk (udevadm
		// wait), not for udev's whole queue (settle), which a starved
		// node's udev left unanswered for its whole timeout.
		if len(disks) > 0 {
			args := []string{"wait", "--timeout=60"}
			for _, d := range disks {
				args = append(args, "/dev/"+d.Name)
			}
			if err := h.Run(ctx, "udevadm", args...); err != nil {
				say(fmt.Sprintf("udev has not handled every disk yet (%v): the disks are listed as they are", err))
			}
			if disks, err = installer.List("/sys/class/block", "/dev/disk", "/run/udev/data"); err != nil {
				return installer.Result{}, err
			}
		}
		m := installer.Medium{Dir: layout.LiveMediumMount}
		need, err := m.MinDiskSize()
		if err != nil {
			return installer.Result{}, err
		}
		rules := installer.Rules{Medium: medium, MinSize: need, InUse: map[string]string{}}
		// A live boot's TERRA-STATE on a disk is mounted: never a target.
		if state, err := mediumDisk("/proc/self/mounts", "/sys/class/block", layout.StateMount); err == nil {
			rules.InUse[state] = "holds this live boot's TERRA-STATE"
		}
		// An installed Terrarium is booted, never installed over: an ISO
		// whose handover the firmware ignored must not reinstall in a loop.
		installed, err := installer.Installed("/sys/class/block")
		if err != nil {
			return installer.Result{}, err
		}
		for name := range installed {
			rules.InUse[name] = "holds an installed Terrarium (boot it; erase it first to install again)"
		}
		target, err := installer.Select(disks, in.Disk, rules)
		if err != nil {
			return installer.Result{}, err
		}
		say(fmt.Sprintf("target %s (boot medium /dev/%s)", target, medium))
		mnt := "/run/terrarium/install-state"
		// Under UEFI the disk becomes the first boot option; under BIOS
		// there are none: the disk boots through GRUB in its MBR (and
		// under UEFI too, should the machine be switched), and the ISO's
		// GRUB menu boots it by default (biosboot.LiveMenu).
		var boot *efiboot.Vars
		if efiboot.Booted(h.Root) {
			boot = &efiboot.Vars{Dir: efiboot.DefaultDir}
		} else {
			say(fmt.Sprintf("booted under BIOS: no boot option to set; %s boots through GRUB in its MBR, and the ISO's menu hands the boot over to it while the ISO comes first", target))
		}
		return installer.Install(ctx, installer.Options{
			Target: target, Medium: m, Wipe: in.Wipe, Report: say,
			Boot: boot,
			State: &installer.State{
				PartitionDev: func(ctx context.Context, n int) (string, error) {
					return installer.WaitPartition(ctx, "/sys/class/block", target.Name, n)
				},
				Format: func(ctx context.Context, dev string) (string, func() error, error) {
					return formatInstalledState(ctx, h, dev, say)
				},
				WithMounted: func(ctx context.Context, dev string, fn func(dir string) error) error {
					if err := os.MkdirAll(mnt, 0o700); err != nil {
						return err
					}
					if err := unix.Mount(dev, mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
						return &os.PathError{Op: "mount", Path: dev, Err: err}
					}
					ferr := fn(mnt)
					unix.Sync()
					if err := unix.Unmount(mnt, 0); err != nil && ferr == nil {
						ferr = &os.PathError{Op: "unmount", Path: mnt, Err: err}
					}
					return ferr
				},
				Seed: seed,
			},
		})
	}
}

// mediumDisk returns the kernel name of the whole disk holding what is
// mounted on mountPoint (per the mounts file): sr0, or sda for a USB stick
// the ISO was written to; for a tmpfs, "tmpfs", which names no disk.
func mediumDisk(mounts, sysBlock, mountPoint string) (string, error) {
	b, err := os.ReadFile(mounts)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != mountPoint {
			continue
		}
		name := filepath.Base(f[0])
		if target, err := os.Readlink(filepath.Join(sysBlock, name)); err == nil {
			if _, err := os.Stat(filepath.Join(sysBlock, name, "partition")); err == nil {
				return filepath.Base(filepath.Dir(target)), nil
			}
		}
		return name, nil
	}
	return "", fmt.Errorf("nothing is mounted on %s: this boot does not run from the ISO", mountPoint)
}
