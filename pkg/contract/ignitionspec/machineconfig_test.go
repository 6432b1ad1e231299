package ignitionspec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// Beside a machine config, the config may not make its admin.
func TestCheckMachineConfig(t *testing.T) {
	c, err := Parse([]byte(fullConfig))
	require.NoError(t, err)
	assert.NoError(t, c.CheckMachineConfig(nil))
	assert.NoError(t, c.CheckMachineConfig(&machineconfig.Config{}))
	assert.NoError(t, c.CheckMachineConfig(&machineconfig.Config{Admin: &machineconfig.Admin{Name: "admin"}}))
	err = c.CheckMachineConfig(&machineconfig.Config{Admin: &machineconfig.Admin{Name: "ops"}})
	require.ErrorIs(t, err, ErrConflict)
	assert.Contains(t, err.Error(), "$.passwd.users[0].name: ops is the machine config's admin; list its keys under admin.sshAuthorizedKeys")
	err = c.CheckMachineConfig(&machineconfig.Config{Admin: &machineconfig.Admin{Name: "app"}})
	require.ErrorIs(t, err, ErrConflict)
	assert.Contains(t, err.Error(), "$.passwd.groups[0].name: app is the machine config's admin")
}

// What the config makes, as the node's check asks it: a user makes its own
// group unless told otherwise.
func TestMakes(t *testing.T) {
	c, err := Parse([]byte(`{"ignition": {"version": "3.4.0"}, "passwd": {
		"groups": [{"name": "app"}],
		"users": [{"name": "ops"}, {"name": "svc", "primaryGroup": "app"}, {"name": "bot", "noUserGroup": true}]}}`))
	require.NoError(t, err)
	for _, name := range []string{"ops", "svc", "bot"} {
		assert.True(t, c.MakesUser(name), name)
	}
	assert.False(t, c.MakesUser("app"))
	assert.True(t, c.MakesGroup("app"), "in passwd.groups")
	assert.True(t, c.MakesGroup("ops"), "its user's own group")
	assert.False(t, c.MakesGroup("svc"), "svc's group is app")
	assert.False(t, c.MakesGroup("bot"), "noUserGroup")
	assert.Equal(t, "$.passwd.users[1]", c.Users[1].At)
}
