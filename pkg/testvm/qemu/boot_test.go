package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// requireQEMU fails (never skips) when QEMU or OVMF is missing: the boot
// tests are part of the suite, not optional.
func requireQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(DefaultBinary); err != nil {
		t.Fatalf("%s not found (%v): run `make deps` to install QEMU and OVMF", DefaultBinary, err)
	}
	for _, f := range []string{DefaultOVMFCode, DefaultOVMFVars} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("OVMF firmware missing (%v): run `make deps` to install QEMU and OVMF", err)
		}
	}
}

// startVM starts a VM that is closed at cleanup; on failure the console log
// path and QEMU's stderr are printed.
func startVM(ctx context.Context, t *testing.T, cfg Config) *VM {
	t.Helper()
	vm, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("qemu: %s", strings.Join(vm.CommandLine(), " "))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console log: %s\nqemu stderr:\n%s", vm.ConsoleLog(), vm.Stderr())
		}
		if err := vm.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return vm
}

type blockInfo struct {
	Device   string `json:"device"`
	QDev     string `json:"qdev"`
	Inserted *struct {
		NodeName string `json:"node-name"`
		File     string `json:"file"`
		RO       bool   `json:"ro"`
		Drv      string `json:"drv"`
	} `json:"inserted"`
}

func queryBlock(ctx context.Context, t *testing.T, vm *VM) []blockInfo {
	t.Helper()
	c, err := vm.QMP(ctx)
	if err != nil {
		t.Fatalf("QMP: %v", err)
	}
	var blocks []blockInfo
	if err := c.Execute(ctx, "query-block", nil, &blocks); err != nil {
		t.Fatalf("query-block: %v", err)
	}
	return blocks
}

func findBlock(blocks []blockInfo, id string) *blockInfo {
	for i, b := range blocks {
		if b.Inserted != nil && b.Inserted.NodeName == id+"-fmt" {
			return &blocks[i]
		}
	}
	return nil
}

func TestBootOVMFNoDisk(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	vm := startVM(ctx, t, Config{Dir: t.TempDir()})
	t.Logf("QEMU answering QMP after %v", time.Since(start).Round(time.Millisecond))

	// With no disk and no NIC, OVMF's boot manager falls through to the
	// built-in UEFI shell.
	m, err := vm.Expect(ctx, regexp.MustCompile(`BdsDxe: starting Boot\d+ "([^"]+)"`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("OVMF started boot option %q after %v", m[1], time.Since(start).Round(time.Millisecond))
	if _, err := vm.Expect(ctx, regexp.MustCompile(`UEFI Interactive Shell v[\d.]+`)); err != nil {
		t.Fatal(err)
	}
	t.Logf("UEFI shell banner after %v", time.Since(start).Round(time.Millisecond))

	status, err := vm.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status != "running" {
		t.Fatalf("query-status: %q, want running", status)
	}

	img := filepath.Join(t.TempDir(), "usb.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := findBlock(queryBlock(ctx, t, vm), "usb0"); got != nil {
		t.Fatalf("usb0 attached before hot-plug: %+v", got)
	}
	if err := vm.HotplugDisk(ctx, Disk{ID: "usb0", Path: img, Format: "raw", Bus: BusUSB}); err != nil {
		t.Fatal(err)
	}
	got := findBlock(queryBlock(ctx, t, vm), "usb0")
	if got == nil {
		t.Fatalf("usb0 not in query-block after hot-plug: %+v", queryBlock(ctx, t, vm))
	}
	if got.Inserted.File != img || got.Inserted.Drv != "raw" || !strings.Contains(got.QDev, "usb0") {
		t.Errorf("query-block entry for usb0: %+v inserted %+v", got, *got.Inserted)
	}

	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.Running() || !vm.ProcessState().Success() {
		t.Fatalf("after Quit: running=%v state=%v", vm.Running(), vm.ProcessState())
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// TestUEFIVarsSurviveRestart sets a non-volatile UEFI variable from the UEFI
// shell, restarts the machine with the same Dir and reads it back.
func TestUEFIVarsSurviveRestart(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const guid = "4e0c7d1a-2e4f-4c1b-9a6b-2f7b1c3d5e6f"
	prompt := regexp.MustCompile(`Shell> `)
	stored := regexp.MustCompile(`TerrariumMark - 0005 Bytes\n68 65 6C 6C 6F`)
	for run := range 2 {
		vm := startVM(ctx, t, Config{Dir: dir})
		shell := func(cmd string, want *regexp.Regexp) {
			t.Helper()
			if err := vm.SendConsole(cmd + "\r"); err != nil {
				t.Fatal(err)
			}
			if want != nil {
				if _, err := vm.Expect(ctx, want); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := vm.Expect(ctx, prompt); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := vm.Expect(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		if run == 0 {
			shell(`setvar TerrariumMark -guid `+guid+` -nv -bs -rt ="hello"`, nil)
		}
		shell(`setvar TerrariumMark -guid `+guid, stored)
		if err := vm.Quit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTPMSurvivesRestart: a machine with a TPM has one QEMU sees (QMP's
// query-tpm), served by a swtpm that keeps its state in Dir across a
// restart and ends with QEMU.
func TestTPMSurvivesRestart(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var state []string
	for run := range 2 {
		vm := startVM(ctx, t, Config{Dir: dir, TPM: true, Network: Network{Mode: NetNone}})
		c, err := vm.QMP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var tpms []struct {
			ID      string `json:"id"`
			Model   string `json:"model"`
			Options struct {
				Type string `json:"type"`
			} `json:"options"`
		}
		if err := c.Execute(ctx, "query-tpm", nil, &tpms); err != nil {
			t.Fatalf("query-tpm: %v", err)
		}
		if len(tpms) != 1 || tpms[0].Model != "tpm-crb" || tpms[0].Options.Type != "emulator" {
			t.Fatalf("run %d: query-tpm: %+v, want one tpm-crb backed by an emulator", run, tpms)
		}
		// OVMF measures the boot into it: its state is written.
		if _, err := vm.Expect(ctx, regexp.MustCompile(`Shell> `)); err != nil {
			t.Fatal(err)
		}
		if err := vm.Quit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := vm.Close(); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(filepath.Join(dir, TPMDir))
		if err != nil || len(entries) == 0 {
			t.Fatalf("run %d: the TPM's state in %s: %v %v", run, TPMDir, entries, err)
		}
		if run == 0 {
			for _, e := range entries {
				state = append(state, e.Name())
			}
		} else if len(entries) != len(state) {
			t.Errorf("the TPM's state changed shape across the restart: %v then %v", state, entries)
		}
	}
	if out, err := exec.Command("pgrep", "-f", "swtpm socket.*"+dir).CombinedOutput(); err == nil {
		t.Errorf("swtpm still runs after QEMU ended: %s", out)
	}
}
