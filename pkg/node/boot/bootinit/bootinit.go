// Package bootinit is the initramfs's /init: it loads the kernel modules the
// boot needs, mounts the active slot's squashfs by partition label, creates
// TERRA-STATE on first boot (and only mounts it afterwards), sets up the
// /etc overlay and /var on STATE, and switches root into systemd. When a
// step fails it says which on the console and opens a rescue shell (after a
// failed trial boot it reboots instead, so that the boot loader falls back);
// it never hangs silently.
package bootinit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/bootloader"
	"github.com/terrarium-os/terrarium/pkg/node/boot/efiboot"
	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
	"golang.org/x/sys/unix"
)

// Init holds what the boot needs from its environment; tests point it at
// fakes. The zero value is not usable: use New.
type Init struct {
	console io.Writer
	sysroot string
	// partitionTimeout bounds the wait for the slot's disk to appear.
	partitionTimeout time.Duration
	// efivars is where efivarfs is mounted.
	efivars string
	cmdline map[string]string
	// trial tells whether this boot of the slot is on trial and a reboot
	// lets the boot loader count its failure and boot something that has
	// tries left (bootloader.RebootHelps); nil until the boot disk is known.
	trial func(ctx context.Context) (bool, error)
	// upgradeTrial tells whether this boot is an upgrade's trial (its slot
	// on trial, the other slot blessed); nil until the boot disk is known.
	upgradeTrial func(ctx context.Context) (bool, error)
	// trialMarker is the file that says so to the booted system
	// (layout.RunTrialBoot).
	trialMarker string
	// reboot restarts the machine; it returns only on failure.
	reboot func() error
	// trialRebootDelay is how long a failed trial boot shows its failure
	// before it reboots.
	trialRebootDelay time.Duration
	// tpmDevice is the TPM 2.0 that seals TERRA-STATE's key (absent on a
	// machine without one).
	tpmDevice string
	// stateEncryptionFile tells the booted system TERRA-STATE's
	// encryption (layout.RunStateEncryption).
	stateEncryptionFile string
	// ask asks a person at the consoles for a line (the recovery key),
	// without echoing it.
	ask func(ctx context.Context, prompt string) (string, error)
}

// New returns the /init of a real boot, writing to console.
func New(console io.Writer) *Init {
	return &Init{console: console, sysroot: "/sysroot", partitionTimeout: 60 * time.Second, efivars: efiboot.DefaultDir,
		reboot: func() error {
			unix.Sync()
			return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		},
		trialRebootDelay:    10 * time.Second,
		trialMarker:         layout.RunTrialBoot,
		tpmDevice:           tpmseal.Device,
		stateEncryptionFile: layout.RunStateEncryption,
		ask:                 consoleAsker{active: "/sys/class/tty/console/active"}.ask,
	}
}

func (in *Init) say(format string, args ...any) {
	_, _ = fmt.Fprintf(in.console, "terrarium-init: "+format+"\n", args...) // nowhere else to report to
}

type step struct {
	name string
	run  func(ctx context.Context) error
}

// Run performs the boot and, when everything succeeded, execs systemd. It
// returns only on failure, after the rescue shell exits.
func (in *Init) Run(ctx context.Context) error {
	early := []step{
		{"mount /proc, /sys, /dev, /run", in.mountEarly},
		{"read kernel command line", in.readCmdline},
		{"load kernel modules", in.loadModules},
		{"mount efivarfs", in.mountEFIVars},
	}
	if err := in.runSteps(ctx, early); err != nil {
		return err
	}
	steps := in.diskSteps()
	if in.live() {
		steps = in.liveSteps()
	} else {
		// Booted from a disk: a handover from the ISO (if any) worked.
		if err := (efiboot.Own{Dir: in.efivars, Name: efiboot.HandoverVar}).Delete(); err != nil {
			in.say("clearing the ISO's handover mark: %v (continuing)", err)
		}
	}
	if err := in.runSteps(ctx, steps); err != nil {
		return err
	}
	if _, ok := in.cmdline[layout.CmdlineRescue]; ok {
		in.say("%s given: rescue shell before switch_root (exit to continue booting)", layout.CmdlineRescue)
		in.shell()
	}
	in.say("switching root to slot %s", in.slot())
	return in.switchRoot()
}

// runSteps runs steps in order, saying each one's outcome; a failed step
// opens the rescue shell.
func (in *Init) runSteps(ctx context.Context, steps []step) error {
	for _, s := range steps {
		start := time.Now()
		if err := s.run(ctx); err != nil {
			in.say("FAILED: %s: %v", s.name, err)
			in.rebootIfOnTrial(ctx)
			return in.rescue(fmt.Errorf("%s: %w", s.name, err))
		}
		in.say("%s: ok (%s)", s.name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// rebootIfOnTrial reboots a failed trial boot, so that the boot loader
// counts the failed try and, once the tries are spent, boots the other
// slot: a slot that cannot even reach its root (a damaged squashfs) falls
// back as one whose health check fails does, instead of waiting in the
// rescue shell for a person. It returns when the boot is not on trial (or
// the reboot failed): the rescue shell follows.
func (in *Init) rebootIfOnTrial(ctx context.Context) {
	if in.trial == nil || in.reboot == nil {
		return
	}
	trial, err := in.trial(ctx)
	if err != nil {
		in.say("cannot tell whether slot %s is on trial: %v", in.slot(), err)
		return
	}
	if !trial {
		return
	}
	in.say("slot %s failed on a trial boot: rebooting in %s so the boot loader counts the failed try (it falls back to the other slot when the tries are spent)", in.slot(), in.trialRebootDelay)
	select {
	case <-ctx.Done():
		return
	case <-time.After(in.trialRebootDelay):
	}
	if err := in.reboot(); err != nil {
		in.say("reboot: %v", err)
	}
}

// trialOf tells whether, after a failure, rebooting lets the boot loader
// on disk's EFI partition count it and boot a slot with tries left.
func (in *Init) trialOf(disk *diskInfo) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		l, err := espLoader(disk)
		if err != nil {
			return false, err
		}
		return l.RebootHelps(ctx, in.slot())
	}
}

// espLoader reads boot counting from disk's EFI partition.
func espLoader(disk *diskInfo) (*bootloader.ESPLoader, error) {
	esp, ok := disk.partDev(layout.LabelESP)
	if !ok {
		return nil, fmt.Errorf("no %s partition on %s", layout.LabelESP, disk.dev())
	}
	return &bootloader.ESPLoader{Device: esp, Mount: "/run/terrarium-init/esp"}, nil
}

// upgradeTrialOf tells whether this boot of the slot is an upgrade's trial,
// from disk's EFI partition.
func (in *Init) upgradeTrialOf(disk *diskInfo) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		l, err := espLoader(disk)
		if err != nil {
			return false, err
		}
		return l.TrialOverBlessed(ctx, in.slot())
	}
}

// markUpgradeTrial writes trialMarker, naming the slot the boot falls back
// to, when this boot is an upgrade's trial: the registry then serves that
// slot's bundle too, so the old control plane can run until the node's
// Kubernetes is upgraded, whatever became of containerd's store. A boot
// that cannot tell goes on without it.
func (in *Init) markUpgradeTrial(ctx context.Context) error {
	if in.upgradeTrial == nil {
		return nil
	}
	trial, err := in.upgradeTrial(ctx)
	if err != nil {
		in.say("cannot tell whether slot %s is an upgrade's trial (%v): going on as if not", in.slot(), err)
		return nil
	}
	if !trial {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(in.trialMarker), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(in.trialMarker, []byte(string(in.slot().Other())+"\n"), 0o644); err != nil {
		return err
	}
	in.say("slot %s is on trial over slot %s: the registry serves slot %s's images too until this boot is blessed", in.slot(), in.slot().Other(), in.slot().Other())
	return nil
}

// countGrubTries moves the tries GRUB recorded on a BIOS boot into the
// entries' names (bootloader.ESPLoader.CountGrubTries), before anything
// reads them. A boot that cannot goes on: GRUB keeps the tries, and counts
// them itself until a boot can.
func (in *Init) countGrubTries(ctx context.Context, disk *diskInfo) error {
	l, err := espLoader(disk)
	if err == nil {
		var said []string
		said, err = l.CountGrubTries(ctx)
		for _, line := range said {
			in.say("boot counting: %s", line)
		}
	}
	if err != nil {
		in.say("cannot count GRUB's tries in the boot entries (%v): going on; GRUB counts them until a boot can", err)
	}
	return nil
}

// diskSteps boot an installed disk: its slot partition and its TERRA-STATE.
func (in *Init) diskSteps() []step {
	var disk, state *diskInfo
	return []step{
		{"find the boot disk", func(ctx context.Context) (err error) {
			if disk, err = in.findDisk(ctx); err == nil {
				in.trial = in.trialOf(disk)
				in.upgradeTrial = in.upgradeTrialOf(disk)
			}
			return err
		}},
		{"count GRUB's tries", func(ctx context.Context) error { return in.countGrubTries(ctx, disk) }},
		{"tell whether this is an upgrade's trial boot", in.markUpgradeTrial},
		{"prepare TERRA-STATE partition", func(ctx context.Context) (err error) { state, err = in.statePartition(ctx, disk); return err }},
		{"mount the slot", func(ctx context.Context) error { return in.mountSlot(disk) }},
		{"prepare TERRA-STATE filesystem", func(ctx context.Context) error { return in.ensureStateFS(ctx, state) }},
		{"set up /etc and /var", in.mountOverlays},
	}
}

func (in *Init) slot() layout.Slot {
	s := layout.Slot(in.cmdline[layout.CmdlineSlot])
	if !s.Valid() {
		return layout.SlotA
	}
	return s
}

func (in *Init) mountEarly(context.Context) error {
	mounts := []struct{ src, dst, fstype, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, unix.MS_NOSUID, m.data); err != nil && err != unix.EBUSY {
			return &os.PathError{Op: "mount " + m.fstype, Path: m.dst, Err: err}
		}
	}
	return nil
}

// mountEFIVars mounts efivarfs (a module: after the modules are loaded).
// Without it the boot goes on: only the ISO's handover to an installed
// disk and the clearing of its mark need UEFI variables.
// A BIOS boot has none: sysfs has no /sys/firmware/efi to mount them on.
func (in *Init) mountEFIVars(context.Context) error {
	err := os.MkdirAll(in.efivars, 0o755)
	if err == nil {
		err = unix.Mount("efivarfs", in.efivars, "efivarfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}
	if err != nil && !errors.Is(err, unix.EBUSY) {
		in.say("no UEFI variables (%v): continuing without them", err)
	}
	return nil
}

func (in *Init) readCmdline(context.Context) error {
	data, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	in.cmdline = parseCmdline(string(data))
	if s := in.cmdline[layout.CmdlineSlot]; s != "" && !layout.Slot(s).Valid() {
		return fmt.Errorf("%s=%q: the slot must be \"a\" or \"b\" (fix the boot entry)", layout.CmdlineSlot, s)
	}
	return nil
}

func parseCmdline(s string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

// loadModules loads the modules listed in the initramfs, in order. A
// module that fails is reported and skipped: the disk it drives may not be
// the boot disk.
func (in *Init) loadModules(context.Context) error {
	order, err := os.ReadFile(layout.InitramfsModulesOrder)
	if err != nil {
		return err
	}
	loaded, failed := 0, 0
	for _, name := range strings.Fields(string(order)) {
		data, err := os.ReadFile(filepath.Join(layout.InitramfsModulesDir, name+".ko"))
		if err == nil {
			err = unix.InitModule(data, "")
		}
		switch {
		case err == nil:
			loaded++
		case errors.Is(err, unix.EEXIST):
		default:
			failed++
			in.say("module %s: %v (continuing)", name, err)
		}
	}
	in.say("loaded %d modules, %d failed", loaded, failed)
	return nil
}

// switchRoot moves the early mounts into the new root and execs systemd.
func (in *Init) switchRoot() error {
	for _, m := range []string{"/dev", "/proc", "/sys", "/run"} {
		if err := unix.Mount(m, filepath.Join(in.sysroot, m), "", unix.MS_MOVE, ""); err != nil {
			return in.rescue(&os.PathError{Op: "move mount", Path: m, Err: err})
		}
	}
	if err := unix.Chdir(in.sysroot); err != nil {
		return in.rescue(err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return in.rescue(&os.PathError{Op: "move root", Path: in.sysroot, Err: err})
	}
	if err := unix.Chroot("."); err != nil {
		return in.rescue(err)
	}
	if err := unix.Chdir("/"); err != nil {
		return in.rescue(err)
	}
	// The initramfs's files stay in memory (a few MiB); systemd does not need them.
	err := unix.Exec("/sbin/init", []string{"/sbin/init"}, os.Environ())
	return in.rescue(fmt.Errorf("exec /sbin/init: %w", err))
}

// rescue opens a shell on the console, again whenever it exits, so a
// failed boot is never a silent hang.
func (in *Init) rescue(cause error) error {
	for {
		in.say("boot failed: %v", cause)
		in.say("rescue shell (busybox); the console log above says what failed. Type 'reboot -f' to retry.")
		in.shell()
		time.Sleep(time.Second)
	}
}

func (in *Init) shell() {
	cmd := exec.Command(layout.InitramfsBusybox, "sh")
	cmd.Env = []string{"PATH=/bin:/sbin:/sysroot/usr/sbin:/sysroot/usr/bin", "PS1=terrarium-rescue# "}
	if tty, err := os.OpenFile("/dev/console", os.O_RDWR, 0); err == nil {
		defer tty.Close()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if err := cmd.Run(); err != nil {
		in.say("rescue shell: %v", err)
	}
}
