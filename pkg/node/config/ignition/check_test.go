package ignition

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// Check names what does not fit the host, with the fix; Apply then writes
// nothing.
func TestCheckConflicts(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeHost)
		json  string
		says  string
	}{
		{"user of the image", nil, `"passwd": {"users": [{"name": "sshd"}]}`,
			`$.passwd.users[0].name: "sshd" is already an account of this image (/etc/passwd); choose another name`},
		{"user named like a group of the image", nil, `"passwd": {"users": [{"name": "adm"}]}`,
			`$.passwd.users[0].name: "adm" is already a group of this image (/etc/group)`},
		{"uid taken", nil, `"passwd": {"users": [{"name": "ops", "uid": 101}]}`,
			"$.passwd.users[0].uid: uid 101 is account sshd's already"},
		{"missing group", nil, `"passwd": {"users": [{"name": "ops", "groups": ["docker"]}]}`,
			"$.passwd.users[0].groups[0]: group docker is not on this image; add it to passwd.groups"},
		{"wheel", nil, `"passwd": {"users": [{"name": "ops", "groups": ["wheel"]}]}`,
			"Debian's administrators group is sudo"},
		{"group that is an account", nil, `"passwd": {"groups": [{"name": "sshd"}]}`,
			`$.passwd.groups[0].name: "sshd" is already an account of this image (/etc/passwd), not a group`},
		{"group with another gid", nil, `"passwd": {"groups": [{"name": "sudo", "gid": 28}]}`,
			"$.passwd.groups[0].gid: group sudo exists with gid 27"},
		{"gid taken", nil, `"passwd": {"groups": [{"name": "app", "gid": 27}]}`,
			"$.passwd.groups[0].gid: gid 27 is group sudo's already"},
		{"owner missing", nil, `"storage": {"files": [{"path": "/etc/x", "user": {"name": "nobody2"}}]}`,
			"$.storage.files[0].user.name: user nobody2 is not on this image"},
		{"parent is a file", func(f *fakeHost) { f.write("/etc/app", "x") },
			`"storage": {"files": [{"path": "/etc/app/app.conf", "contents": {"source": "data:,x"}}]}`,
			"$.storage.files[0].path: /etc/app/app.conf is under /etc/app, which is a file on this host"},
		{"other contents", func(f *fakeHost) { f.write("/etc/motd", "theirs") },
			`"storage": {"files": [{"path": "/etc/motd", "contents": {"source": "data:,ours"}}]}`,
			"$.storage.files[0].path: /etc/motd exists with other contents; set overwrite: true"},
		{"file on a directory", func(f *fakeHost) { f.write("/etc/motd/x", "") },
			`"storage": {"files": [{"path": "/etc/motd", "overwrite": true, "contents": {"source": "data:,x"}}]}`,
			"/etc/motd is a directory on this host"},
		{"directory on a file", func(f *fakeHost) { f.write("/etc/app", "") },
			`"storage": {"directories": [{"path": "/etc/app"}]}`,
			"/etc/app exists and is not a directory; remove it, or set overwrite: true"},
		{"link elsewhere", func(f *fakeHost) { require.NoError(f.t, os.Symlink("/a", f.Path("/etc/l"))) },
			`"storage": {"links": [{"path": "/etc/l", "target": "/b"}]}`,
			"/etc/l links to /a on this host"},
		{"unit not on the image", nil, `"systemd": {"units": [{"name": "nope.service", "enabled": true}]}`,
			"$.systemd.units[0].name: unit nope.service is not on this image, and the config gives no contents"},
		{"masked unit", func(f *fakeHost) {
			f.write("/etc/systemd/system/.keep", "")
			require.NoError(f.t, os.Symlink("/dev/null", f.Path("/etc/systemd/system/containerd.service")))
		}, `"systemd": {"units": [{"name": "containerd.service", "enabled": true}]}`,
			"containerd.service is masked on this host; add mask: false"},
		{"mask over a file", func(f *fakeHost) { f.write("/etc/systemd/system/x.service", "[Service]\n") },
			`"systemd": {"units": [{"name": "x.service", "mask": true}]}`,
			"/etc/systemd/system/x.service is a file on this host, and masking needs its place"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeHost(t)
			if tt.setup != nil {
				tt.setup(f)
			}
			c := mustParse(t, `{"ignition": {"version": "3.4.0"}, `+tt.json+`}`)
			err := Check(f.Host, c)
			require.Error(t, err)
			assert.ErrorIs(t, err, ignitionspec.ErrConflict)
			assert.Contains(t, err.Error(), tt.says)

			passwd, group := f.read("/etc/passwd"), f.read("/etc/group")
			require.ErrorIs(t, Apply(context.Background(), f.Host, c), ignitionspec.ErrConflict)
			assert.Empty(t, f.take(), "no command after a failed check")
			assert.Equal(t, passwd, f.read("/etc/passwd"))
			assert.Equal(t, group, f.read("/etc/group"))
			assert.NoFileExists(t, f.Path(StateFile), "nothing recorded")
		})
	}
}

// An existing group is fine as a group; a file with the same contents
// needs no overwrite; the config's own accounts, groups and files are its
// own on the next check.
func TestCheckAccepts(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	f.write("/etc/motd", "same")
	c := mustParse(t, `{"ignition": {"version": "3.4.0"},
		"passwd": {"groups": [{"name": "sudo", "gid": 27}, {"name": "app"}],
		           "users": [{"name": "svc", "primaryGroup": "app", "groups": ["sudo"]}]},
		"storage": {"files": [{"path": "/etc/motd", "contents": {"source": "data:,same"}},
		                      {"path": "/var/lib/svc/x", "user": {"name": "svc"}, "group": {"name": "app"}}]}}`)
	require.NoError(t, Check(f.Host, c))
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, []string{"groupadd app", "useradd --create-home --gid app --no-user-group --groups sudo svc"}, f.take())
	require.NoError(t, Check(f.Host, c), "its own accounts")
	require.NoError(t, Verify(ctx, f.Host, c))
}
