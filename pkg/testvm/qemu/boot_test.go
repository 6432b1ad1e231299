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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireQEMU fails (never skips) when QEMU or OVMF is missing: the boot
// tests are part of the suite, not optional.
func requireQEMU(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath(DefaultBinary)
	require.NoError(t, err, "%s not found: run `make deps` to install QEMU and OVMF", DefaultBinary)
	for _, f := range []string{DefaultOVMFCode, DefaultOVMFVars} {
		_, err := os.Stat(f)
		require.NoError(t, err, "OVMF firmware missing: run `make deps` to install QEMU and OVMF")
	}
}

// startVM starts a VM that is closed at cleanup; on failure the console log
// path and QEMU's stderr are printed.
func startVM(ctx context.Context, t *testing.T, cfg Config) *VM {
	t.Helper()
	vm, err := Start(ctx, cfg)
	require.NoError(t, err, "Start")
	t.Logf("qemu: %s", strings.Join(vm.CommandLine(), " "))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console log: %s\nqemu stderr:\n%s", vm.ConsoleLog(), vm.Stderr())
		}
		assert.NoError(t, vm.Close(), "Close")
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
	require.NoError(t, err, "QMP")
	var blocks []blockInfo
	require.NoError(t, c.Execute(ctx, "query-block", nil, &blocks), "query-block")
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

// queryTPM asserts the machine has one TPM QEMU sees (QMP's query-tpm): a
// tpm-crb served by an emulator (swtpm).
func queryTPM(ctx context.Context, t *testing.T, vm *VM) {
	t.Helper()
	c, err := vm.QMP(ctx)
	require.NoError(t, err, "QMP")
	var tpms []struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Options struct {
			Type string `json:"type"`
		} `json:"options"`
	}
	require.NoError(t, c.Execute(ctx, "query-tpm", nil, &tpms), "query-tpm")
	require.Len(t, tpms, 1, "query-tpm: %+v", tpms)
	assert.Equal(t, "tpm-crb", tpms[0].Model)
	assert.Equal(t, "emulator", tpms[0].Options.Type)
}

// TestMachineAcrossRestart: one machine with a TPM and no disk, in two
// boots with the same Dir. OVMF's boot manager falls through to its UEFI
// shell; QMP answers (query-status, query-tpm); a USB stick hot-plugged
// over QMP shows in query-block; a non-volatile UEFI variable set from
// the shell is read back after the restart; the TPM, served by a swtpm
// that keeps its state in Dir (into which OVMF measures the boot), has the
// same state files after it, and the swtpm ends with QEMU.
func TestMachineAcrossRestart(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const guid = "4e0c7d1a-2e4f-4c1b-9a6b-2f7b1c3d5e6f"
	prompt := regexp.MustCompile(`Shell> `)
	stored := regexp.MustCompile(`TerrariumMark - 0005 Bytes\n68 65 6C 6C 6F`)
	var state []string
	for run := range 2 {
		start := time.Now()
		vm := startVM(ctx, t, Config{Dir: dir, TPM: true, Network: Network{Mode: NetNone}})
		t.Logf("run %d: QEMU answering QMP after %v", run, time.Since(start).Round(time.Millisecond))
		queryTPM(ctx, t, vm)
		shell := func(cmd string, want *regexp.Regexp) {
			t.Helper()
			require.NoError(t, vm.SendConsole(cmd+"\r"))
			if want != nil {
				_, err := vm.Expect(ctx, want)
				require.NoError(t, err)
			}
			_, err := vm.Expect(ctx, prompt)
			require.NoError(t, err)
		}
		if run == 0 {
			m, err := vm.Expect(ctx, regexp.MustCompile(`BdsDxe: starting Boot\d+ "([^"]+)"`))
			require.NoError(t, err)
			t.Logf("OVMF started boot option %q after %v", m[1], time.Since(start).Round(time.Millisecond))
			_, err = vm.Expect(ctx, regexp.MustCompile(`UEFI Interactive Shell v[\d.]+`))
			require.NoError(t, err)
		}
		_, err := vm.Expect(ctx, prompt)
		require.NoError(t, err)
		t.Logf("run %d: the UEFI shell's prompt after %v", run, time.Since(start).Round(time.Millisecond))
		status, err := vm.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "running", status, "query-status")

		if run == 0 {
			shell(`setvar TerrariumMark -guid `+guid+` -nv -bs -rt ="hello"`, nil)
			img := filepath.Join(t.TempDir(), "usb.img")
			require.NoError(t, os.WriteFile(img, make([]byte, 1<<20), 0o644))
			require.Nil(t, findBlock(queryBlock(ctx, t, vm), "usb0"), "usb0 attached before hot-plug")
			require.NoError(t, vm.HotplugDisk(ctx, Disk{ID: "usb0", Path: img, Format: "raw", Bus: BusUSB}))
			got := findBlock(queryBlock(ctx, t, vm), "usb0")
			require.NotNil(t, got, "usb0 in query-block after hot-plug: %+v", queryBlock(ctx, t, vm))
			assert.Equal(t, img, got.Inserted.File)
			assert.Equal(t, "raw", got.Inserted.Drv)
			assert.Contains(t, got.QDev, "usb0")
		}
		shell(`setvar TerrariumMark -guid `+guid, stored)

		require.NoError(t, vm.Quit(ctx))
		assert.False(t, vm.Running(), "after Quit")
		assert.True(t, vm.ProcessState().Success(), "after Quit: %v", vm.ProcessState())
		require.NoError(t, vm.Close())
		entries, err := os.ReadDir(filepath.Join(dir, TPMDir))
		require.NoError(t, err, "the TPM's state in %s", TPMDir)
		require.NotEmpty(t, entries, "the TPM's state in %s", TPMDir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if run == 0 {
			state = names
		} else {
			assert.Equal(t, state, names, "the TPM's state keeps its shape across the restart")
		}
		t.Logf("run %d: total %v", run, time.Since(start).Round(time.Millisecond))
	}
	out, err := exec.Command("pgrep", "-f", "swtpm socket.*"+dir).CombinedOutput()
	assert.Error(t, err, "swtpm still runs after QEMU ended: %s", out)
}
