package firstboot

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/node/configsource"

	"github.com/terrarium-os/terrarium/pkg/node/bootloader"

	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/configsource/labeldisk"
)

func TestRunWithConfigDisk(t *testing.T) {
	// The production config source on a real config disk image.
	e := newEnv(t)
	dir := t.TempDir()
	if err := configdisk.Write(filepath.Join(dir, layout.LabelConfigFAT), []byte(fullConfig)); err != nil {
		t.Fatal(err)
	}
	if err := e.runWithProviders(labeldisk.Provider{Dir: dir}); err != nil {
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
	if o.Console == nil || o.Log == nil || len(o.Sources) != 7 || len(o.ChangeSources) != 5 || o.BootLoader == nil || o.Reboot == nil || o.Host.Now == nil {
		t.Errorf("unset fields: %+v", o)
	}
	if o.PollInterval <= 0 || o.AddressWait <= 0 || o.TrialRebootDelay <= 0 {
		t.Errorf("durations: %+v", o)
	}
	l, ok := o.BootLoader.(*bootloader.ESPLoader)
	if !ok || l.Device != "/dev/disk/by-partlabel/"+layout.LabelESP {
		t.Errorf("bootloader.BootLoader = %#v", o.BootLoader)
	}
}

// TestSourceOrder pins the documented order of config sources
// (docs/config-acquisition.md).
func TestSourceOrder(t *testing.T) {
	names := func(ps []configsource.Provider) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name())
		}
		return out
	}
	o := Defaults(slog.New(slog.DiscardHandler))
	assert.Equal(t, []string{"image", "kernel-cmdline", "config-disk", "nocloud", "openstack-config-drive", "vmware", "qemu-fw_cfg"}, names(o.Sources))
	assert.Equal(t, []string{"config-disk", "nocloud", "openstack-config-drive", "vmware", "qemu-fw_cfg"}, names(o.ChangeSources))
	doc, err := os.ReadFile("../../../docs/config-acquisition.md")
	require.NoError(t, err)
	for _, n := range names(o.Sources) {
		assert.Contains(t, string(doc), "`"+n+"`", "docs/config-acquisition.md lists the source")
	}
}
