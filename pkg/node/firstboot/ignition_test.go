package firstboot

import (
	"context"
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
