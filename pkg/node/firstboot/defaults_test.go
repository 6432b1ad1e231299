package firstboot

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"

	"github.com/terrarium-os/terrarium/pkg/node/boot/bootloader"

	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/labeldisk"
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
	if s := e.status(); s.State != status.StateProvisioned || s.Hostname != "node-1" {
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
	require.NotNil(t, o.Host)
	assert.Equal(t, "/", o.Host.Root)
	assert.NotNil(t, o.Host.Executor)
	assert.NotNil(t, o.Host.Clock)
	assert.NotNil(t, o.Console)
	assert.NotNil(t, o.Log)
	assert.Len(t, o.Sources, 7)
	assert.Len(t, o.ChangeSources, 5)
	assert.NotNil(t, o.Reboot)
	assert.Positive(t, o.PollInterval)
	assert.Positive(t, o.AddressWait)
	assert.Positive(t, o.TrialRebootDelay)
	l, ok := o.BootLoader.(*bootloader.ESPLoader)
	require.True(t, ok, "boot loader %#v", o.BootLoader)
	assert.Equal(t, "/dev/disk/by-partlabel/"+layout.LabelESP, l.Device)
	// The cluster's production dependencies are complete: a flow can be
	// built from them.
	_, err := kubeadmflow.New(o.Host, o.Cluster, &nodestate.Store{}, host.ReporterFunc(func(string, step.Result, string) {}), func(func(*kubeadmflow.ClusterStatus)) {})
	assert.NoError(t, err)
	assert.Equal(t, kubeadmflow.DefaultTiming(), o.Cluster.Timing)
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
