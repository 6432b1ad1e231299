package firstboot

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/status"
)

const ignitionAlone = `{"ignition": {"version": "3.4.0"},
 "storage": {"files": [{"path": "/etc/app/app.conf", "contents": {"source": "data:,listen%3D8080%0A"}}]},
 "systemd": {"units": [{"name": "app.service", "contents": "[Unit]\nDescription=app\n[Service]\nExecStart=/bin/true\n"}]}}`

// An Ignition config alone (a CoreOS user's .ign) enrolls the node: it
// gets the default hostname and DHCP, and its file and unit.
func TestIgnitionAlone(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.run(ignitionAlone))
	assert.Equal(t, IgnitionHostname+"\n", e.read("/etc/hostname"))
	assert.Contains(t, e.read("/etc/systemd/network/10-terrarium-0.network"), "Name=en*\n")
	assert.Equal(t, "listen=8080\n", e.read("/etc/app/app.conf"))
	assert.Contains(t, e.read("/etc/systemd/system/app.service"), "ExecStart=/bin/true")
	assert.Contains(t, stepResults(e.lastBoot()), "ignition=applied")
	assert.Contains(t, e.commands(), "systemctl daemon-reload")
	assert.Contains(t, e.status().Enrolled, "from "+configFrom)

	// The next boot verifies it and runs nothing of it again.
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	require.NoError(t, e.run(ignitionAlone))
	assert.Contains(t, stepResults(e.lastBoot()), "ignition=verified")
	assert.NotContains(t, e.commands(), "systemctl daemon-reload")
}

// An Ignition config with a section Terrarium does not apply is invalid as
// a whole: named on the console, nothing applied, not enrolled.
func TestIgnitionRefusedSection(t *testing.T) {
	e := newEnv(t)
	bad := `{"ignition": {"version": "3.4.0"}, "storage": {"disks": [{"device": "/dev/vdb", "wipeTable": true}],
	 "files": [{"path": "/etc/app/app.conf", "contents": {"source": "data:,x"}}]}}`
	require.ErrorIs(t, e.runUntil(e.options(staticSource(bad)), inState(status.StateConfigInvalid)), context.Canceled)
	s := e.status()
	assert.Equal(t, status.StateConfigInvalid, s.State)
	assert.Contains(t, s.Message, "$.storage.disks")
	assert.False(t, e.exists("/etc/hostname"), "nothing applied")
	assert.False(t, e.exists("/etc/app/app.conf"))
	assert.Nil(t, e.journal().Enrollment)
}

// A Fedora CoreOS user's Butane config and a Flatcar user's Container
// Linux Config, handed to the node as they are (the node reads them where
// it reads Ignition), enroll it as their Ignition would: a file, a unit
// and a user. (An enabled unit is package ignition's test and the QEMU
// case's: this fake host answers no systemctl.)
func TestCoreOSConfigsAlone(t *testing.T) {
	for _, tc := range []struct {
		name, config, from string
	}{{
		name: "Butane",
		config: `variant: fcos
version: 1.5.0
passwd:
  users:
    - name: core
      ssh_authorized_keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop"]
storage:
  files:
    - path: /etc/app/app.conf
      contents:
        inline: "listen=8080\n"
systemd:
  units:
    - name: app.service
      contents: "[Unit]\nDescription=app\n[Service]\nExecStart=/bin/true\n"
`,
		from: ":config.bu",
	}, {
		name: "Container Linux Config",
		config: `passwd:
  users:
    - name: core
      ssh_authorized_keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop"]
storage:
  files:
    - path: /etc/app/app.conf
      filesystem: root
      contents:
        inline: "listen=8080\n"
systemd:
  units:
    - name: app.service
      contents: "[Unit]\nDescription=app\n[Service]\nExecStart=/bin/true\n"
`,
		from: ":config.clc",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(configFrom, []byte(tc.config))
			require.NoError(t, err)
			assert.Equal(t, IgnitionHostname, cfg.Hostname)
			assert.Regexp(t, `^"3\.\d+\.0"$`, jsonField(t, cfg.Ignition, "ignition", "version"), "Ignition 3, as the node applies it")

			e := newEnv(t)
			require.NoError(t, e.run(tc.config))
			assert.Equal(t, IgnitionHostname+"\n", e.read("/etc/hostname"))
			assert.Equal(t, "listen=8080\n", e.read("/etc/app/app.conf"))
			assert.Contains(t, e.read("/etc/systemd/system/app.service"), "ExecStart=/bin/true")
			assert.Contains(t, strings.Join(e.commands(), "\n"), "useradd")
			assert.Contains(t, stepResults(e.lastBoot()), "ignition=applied")
		})
	}
}

// A machine config is never taken for a Container Linux Config, though
// its ignition: is a section of one: with its keys bare or quoted, and
// when it does not parse (its own parser says why).
func TestMachineConfigWithIgnitionIsNotCLC(t *testing.T) {
	block := "ignition: |\n  " + strings.ReplaceAll(ignitionAlone, "\n", "\n  ") + "\n"
	for name, data := range map[string]string{
		"bare keys":   "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n1\n" + block,
		"quoted keys": "\"apiVersion\": terrarium.dev/v1alpha1\n'kind': MachineConfig\nhostname: n1\n" + block,
		"not YAML":    "apiVersion: terrarium.dev/v1alpha1\nkind: [MachineConfig\n" + block,
		"kind alone":  "kind: MachineConfig\nhostname: n1\n" + block,
	} {
		_, got, err := coreOSConfig(configFrom, []byte(data))
		require.NoError(t, err, name)
		assert.Empty(t, got, "%s: a machine config", name)
	}
	_, _, err := coreOSConfig(configFrom, []byte(block))
	require.Error(t, err, "without apiVersion and kind, ignition: makes a Container Linux Config, whose translator reads it")
	assert.Contains(t, err.Error(), configFrom+":config.clc:1:")
}

// A Butane config the node cannot apply is refused at its line and column
// in the config as handed in, naming the source; nothing is applied.
func TestButaneRefusedAtItsLine(t *testing.T) {
	e := newEnv(t)
	bad := "variant: fcos\nversion: 1.5.0\nstorage:\n  disks:\n    - device: /dev/vdb\n      wipe_table: true\n"
	require.ErrorIs(t, e.runUntil(e.options(staticSource(bad)), inState(status.StateConfigInvalid)), context.Canceled)
	s := e.status()
	assert.Equal(t, status.StateConfigInvalid, s.State)
	assert.Contains(t, s.Message, configFrom+":config.bu:4:3: $.storage.disks: Terrarium does not partition disks; use the build spec")
	assert.False(t, e.exists("/etc/hostname"), "nothing applied")
	assert.Nil(t, e.journal().Enrollment)
}

// jsonField returns the JSON of doc's field at path.
func jsonField(t *testing.T, doc string, path ...string) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(doc), &v))
	for _, k := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s is not an object", k)
		v = m[k]
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
