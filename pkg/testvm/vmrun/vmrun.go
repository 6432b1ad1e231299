// Package vmrun boots an image interactively in QEMU for `imagebuild run`:
// a copy-on-write overlay keeps the image untouched, config disks are
// attached, and the serial console is streamed to the terminal.
package vmrun

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// Options of a run.
type Options struct {
	Image    string   // qcow2 or raw image; never written
	Configs  []string // config disk images, attached read-only
	DiskSize string   // size of the boot disk overlay, e.g. "8G"
	Dir      string   // machine dir (kept, so a second run reboots the same machine)
	Network  bool     // restricted user network (no route out)
	Capture  string   // pcap of the network, optional
}

// Run boots the machine and streams its console to out until the VM
// stops or ctx ends. Lines read from in are typed on the serial console.
func Run(ctx context.Context, o Options, in io.Reader, out io.Writer) error {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	abs, err := filepath.Abs(o.Image)
	if err != nil {
		return err
	}
	boot := filepath.Join(o.Dir, "boot.qcow2")
	if _, err := os.Stat(boot); os.IsNotExist(err) {
		format := "qcow2"
		if filepath.Ext(abs) == ".raw" {
			format = "raw"
		}
		cmd := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", format, "-b", abs, boot, o.DiskSize)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("create boot disk overlay: %w: %s", err, b)
		}
	}
	disks := []qemu.Disk{{ID: "boot", Path: boot, Format: "qcow2"}}
	for i, c := range o.Configs {
		disks = append(disks, qemu.Disk{ID: fmt.Sprintf("config%d", i), Path: c, Format: "raw", ReadOnly: true})
	}
	cfg := qemu.Config{Dir: filepath.Join(o.Dir, "vm"), Disks: disks}
	if o.Network {
		cfg.Network = qemu.Network{Mode: qemu.NetRestricted, Capture: o.Capture}
	}
	vm, err := qemu.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer vm.Close()
	if _, err := fmt.Fprintf(out, "QEMU started (TCG, UEFI); console log %s; Ctrl-C stops the machine\n", vm.ConsoleLog()); err != nil {
		return err
	}
	go typeInto(vm, in)
	return stream(ctx, vm, out)
}

func typeInto(vm *qemu.VM, in io.Reader) {
	if in == nil {
		return
	}
	s := bufio.NewScanner(in)
	for s.Scan() {
		if err := vm.SendConsole(s.Text() + "\r"); err != nil {
			return
		}
	}
}

// stream copies the console log as it grows.
func stream(ctx context.Context, vm *qemu.VM, out io.Writer) error {
	f, err := os.Open(vm.ConsoleLog())
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		if _, err := io.Copy(out, f); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return vm.Quit(context.Background())
		case <-vm.Exited():
			_, err := io.Copy(out, f) // what it wrote last
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
