package firstboot

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/terrarium-os/terrarium/pkg/configdisk"
	"github.com/terrarium-os/terrarium/pkg/layout"
)

func TestConfigFromLabel(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := ConfigFromLabel(dir)

	// No disk.
	data, from, ok, err := src(ctx)
	if ok || err != nil || data != nil || from != "" {
		t.Errorf("no disk: %q, %q, %v, %v", data, from, ok, err)
	}

	// A disk labelled as FAT stores the label.
	fat := filepath.Join(dir, layout.LabelConfigFAT)
	if err := configdisk.Write(fat, []byte(minimalConfig)); err != nil {
		t.Fatal(err)
	}
	data, from, ok, err = src(ctx)
	if !ok || err != nil || string(data) != minimalConfig || from != fat {
		t.Errorf("TERRA-CONFI: %q, %q, %v, %v", data, from, ok, err)
	}

	// The full label wins when both are present.
	full := filepath.Join(dir, layout.LabelConfig)
	if err := configdisk.Write(full, []byte(fullConfig)); err != nil {
		t.Fatal(err)
	}
	data, from, ok, err = src(ctx)
	if !ok || err != nil || string(data) != fullConfig || from != full {
		t.Errorf("TERRA-CONFIG: %q, %q, %v, %v", data, from, ok, err)
	}
}

func TestConfigFromLabelNoMachineYAML(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, layout.LabelConfig)
	d, err := diskfs.Create(dev, configdisk.Size, diskfs.SectorSizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: layout.LabelConfigFAT}); err != nil {
		t.Fatal(err)
	}
	d.Close()

	_, from, ok, err := ConfigFromLabel(dir)(context.Background())
	// The disk is there (ok) but has no config: firstboot reports the error.
	if !ok || !errors.Is(err, configdisk.ErrNoConfig) || from != dev {
		t.Errorf("= %q, %v, %v; want the device, ok and ErrNoConfig", from, ok, err)
	}
}

func TestConfigFromLabelUnreadable(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, layout.LabelConfig)
	if err := os.WriteFile(dev, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	data, from, ok, err := ConfigFromLabel(dir)(context.Background())
	if ok || err == nil || data != nil || from != dev {
		t.Errorf("= %q, %q, %v, %v; want an error for %s", data, from, ok, err, dev)
	}
}

func TestRunWithConfigDisk(t *testing.T) {
	// The production config source on a real config disk image.
	e := newEnv(t)
	dir := t.TempDir()
	if err := configdisk.Write(filepath.Join(dir, layout.LabelConfigFAT), []byte(fullConfig)); err != nil {
		t.Fatal(err)
	}
	if err := e.runWith(ConfigFromLabel(dir)); err != nil {
		t.Fatalf("Run: %v\n%s", err, e.console.String())
	}
	if s := e.status(); s.State != StateProvisioned || s.Hostname != "node-1" {
		t.Errorf("status = %+v", s)
	}
	if !strings.Contains(e.console.String(), "config from "+filepath.Join(dir, layout.LabelConfigFAT)+" is valid") {
		t.Errorf("console:\n%s", e.console.String())
	}
}

func TestConsolesSkipsMissingTTYs(t *testing.T) {
	// Console names that do not exist under /dev are skipped; Write never
	// fails. (The names are made up so that no real console is written.)
	active := filepath.Join(t.TempDir(), "active")
	if err := os.WriteFile(active, []byte("terrarium-test-no-such-tty0 terrarium-test-no-such-tty1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Consoles{SysActive: active}.Write([]byte("hello\n"))
	if n != 6 || err != nil {
		t.Errorf("Write = %d, %v", n, err)
	}
}

func TestDefaults(t *testing.T) {
	o := Defaults(slog.New(slog.DiscardHandler))
	if o.Host == nil || o.Host.Root != "/" || o.Host.Exec == nil {
		t.Errorf("Host = %+v", o.Host)
	}
	if o.Console == nil || o.Log == nil || o.ConfigSource == nil || o.BootLoader == nil || o.Reboot == nil || o.Now == nil {
		t.Errorf("unset fields: %+v", o)
	}
	if o.PollInterval <= 0 || o.AddressWait <= 0 || o.TrialRebootDelay <= 0 {
		t.Errorf("durations: %+v", o)
	}
	l, ok := o.BootLoader.(*ESPLoader)
	if !ok || l.Device != "/dev/disk/by-partlabel/"+layout.LabelESP {
		t.Errorf("BootLoader = %#v", o.BootLoader)
	}
}
