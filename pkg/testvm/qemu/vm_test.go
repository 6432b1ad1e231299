package qemu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestStartReportsEarlyExit(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "fake-qemu")
	script := "#!/bin/sh\necho 'fake-qemu: cannot do that' >&2\nexit 3\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		cfg   Config
		wants []string
		real  bool
	}{
		{name: "fake binary", cfg: Config{Binary: fake}, wants: []string{"exit status 3", "fake-qemu: cannot do that"}},
		{name: "missing binary", cfg: Config{Binary: "/nonexistent/qemu"}, wants: []string{"/nonexistent/qemu"}},
		{name: "qemu rejects a device", real: true,
			cfg:   Config{ExtraArgs: []string{"-device", "no-such-device"}},
			wants: []string{"exit status 1", "no-such-device"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.real {
				requireQEMU(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tt.cfg.Dir = t.TempDir()
			start := time.Now()
			vm, err := Start(ctx, tt.cfg)
			if err == nil {
				t.Fatalf("Start succeeded (Close: %v)", vm.Close())
			}
			t.Logf("Start: %v", err)
			for _, want := range tt.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Start took %v to notice the failure", d)
			}
		})
	}
}

func TestExpectReturnsWhenVMDies(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vm := startVM(ctx, t, Config{Dir: t.TempDir()})
	time.AfterFunc(time.Second, func() {
		if err := vm.Kill(); err != nil {
			t.Errorf("kill: %v", err)
		}
	})
	start := time.Now()
	_, err := vm.Expect(ctx, regexp.MustCompile(`this never appears`))
	if err == nil || !strings.Contains(err.Error(), "QEMU exited (signal: killed)") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Expect returned %v after start, want promptly after the kill", d)
	}
	if vm.Running() || vm.ProcessState() == nil {
		t.Errorf("Running=%v ProcessState=%v after kill", vm.Running(), vm.ProcessState())
	}
	if err := vm.Wait(ctx); err == nil {
		t.Error("Wait after SIGKILL returned nil")
	}
	if _, err := vm.QMP(ctx); err == nil {
		t.Error("QMP after exit returned no error")
	}
}

func makeImage(t *testing.T, name, format string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("qemu-img", "create", "-q", "-f", format, path, "16M").CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create (run `make deps`): %v: %s", err, out)
	}
	return path
}

// TestDevices starts a machine with every kind of disk and the restricted
// network, without waiting for the firmware, and exercises hot-plug.
func TestDevices(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vm := startVM(ctx, t, Config{
		Dir: t.TempDir(),
		Disks: []Disk{
			{ID: "root", Path: makeImage(t, "root.qcow2", "qcow2"), Format: "qcow2"},
			{ID: "stick", Path: makeImage(t, "stick.img", "raw"), Format: "raw", Bus: BusUSB, ReadOnly: true},
			{Path: makeImage(t, "nvme.img", "raw"), Format: "raw", Bus: BusNVMe, Serial: "TERRA1"},
		},
		Network: Network{Mode: NetRestricted, Capture: filepath.Join(t.TempDir(), "net.pcap")},
		FwCfg:   []FwCfg{{Name: "opt/terrarium/test", String: "hello"}},
	})
	blocks := queryBlock(ctx, t, vm)
	for _, want := range []struct {
		id, drv string
		ro      bool
	}{{"root", "qcow2", false}, {"stick", "raw", true}, {"disk2", "raw", false}} {
		b := findBlock(blocks, want.id)
		if b == nil {
			t.Errorf("%s not in query-block", want.id)
			continue
		}
		if b.Inserted.Drv != want.drv || b.Inserted.RO != want.ro {
			t.Errorf("%s: drv %s ro %v, want %s %v", want.id, b.Inserted.Drv, b.Inserted.RO, want.drv, want.ro)
		}
	}

	checkHotplug(ctx, t, vm)
	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkHotplug plugs PCI disks into both root ports, checks that a third
// and broken disks fail cleanly, and pulls the USB disk "stick".
func checkHotplug(ctx context.Context, t *testing.T, vm *VM) {
	t.Helper()
	hot := []Disk{
		{ID: "hv", Path: makeImage(t, "hv.img", "raw"), Format: "raw"},
		{ID: "hn", Path: makeImage(t, "hn.img", "raw"), Format: "raw", Bus: BusNVMe, Serial: "HOT1"},
		{ID: "hx", Path: makeImage(t, "hx.img", "raw"), Format: "raw"},
	}
	for _, d := range hot[:2] {
		if err := vm.HotplugDisk(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := vm.HotplugDisk(ctx, hot[2]); err == nil || !strings.Contains(err.Error(), "no free pcie-root-port") {
		t.Errorf("third PCI hot-plug: err = %v", err)
	}
	// A failed device_add leaves no block nodes behind.
	missing := Disk{ID: "missing", Path: "/nonexistent.img", Format: "raw", Bus: BusUSB}
	if err := vm.HotplugDisk(ctx, missing); err == nil {
		t.Error("hot-plugging a missing file succeeded")
	}
	// device_add fails (the NIC has id nic0): the block nodes are removed.
	clash := Disk{ID: "nic0", Path: makeImage(t, "clash.img", "raw"), Format: "raw", Bus: BusUSB}
	if err := vm.HotplugDisk(ctx, clash); err == nil || !strings.Contains(err.Error(), "device_add") {
		t.Errorf("hot-plug with a clashing device id: err = %v", err)
	}
	c, err := vm.QMP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []struct {
		NodeName string `json:"node-name"`
	}
	if err := c.Execute(ctx, "query-named-block-nodes", nil, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if strings.HasPrefix(n.NodeName, "nic0-") || strings.HasPrefix(n.NodeName, "missing-") {
			t.Errorf("block node %s left behind by a failed hot-plug", n.NodeName)
		}
	}
	blocks := queryBlock(ctx, t, vm)
	for _, id := range []string{"hv", "hn"} {
		if findBlock(blocks, id) == nil {
			t.Errorf("%s not in query-block after hot-plug", id)
		}
	}

	// USB disks can be pulled at any time.
	if err := vm.UnplugDisk(ctx, "stick"); err != nil {
		t.Fatal(err)
	}
	if b := findBlock(queryBlock(ctx, t, vm), "stick"); b != nil {
		t.Errorf("stick still attached after unplug: %+v", b)
	}
}

func TestQuitAfterClose(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vm, err := Start(ctx, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := vm.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := vm.Quit(ctx); err == nil {
		t.Error("Quit after Close succeeded")
	}
	if err := vm.SendConsole("x"); !errors.Is(err, os.ErrClosed) {
		t.Errorf("SendConsole after Close: %v", err)
	}
}
