package ignition

import (
	"context"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

func mustParse(t *testing.T, data string) *ignitionspec.Config {
	t.Helper()
	c, err := ignitionspec.Parse([]byte(data))
	require.NoError(t, err)
	return c
}

// owner is the owner of a path under the fake host's root.
func (f *fakeHost) owner(p string) (int, int) {
	f.t.Helper()
	fi, err := os.Lstat(f.Path(p))
	require.NoError(f.t, err)
	uid, gid, ok := fileOwner(fi)
	require.True(f.t, ok)
	return uid, gid
}

func (f *fakeHost) mode(p string) fs.FileMode {
	f.t.Helper()
	fi, err := os.Lstat(f.Path(p))
	require.NoError(f.t, err)
	return fi.Mode().Perm()
}

func TestApplyThenVerify(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	c := mustParse(t, fullConfig)

	require.Error(t, Verify(ctx, f.Host, c), "verify before apply")
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, []string{
		"groupadd app",
		"useradd --create-home --user-group --groups sudo,app --shell /bin/bash ops",
		"systemctl daemon-reload",
		"systemctl try-restart --no-block app.service",
		"systemctl try-restart --no-block containerd.service",
		"systemctl enable --now --no-block app.service",
	}, f.take())

	// Accounts: ops (uid 1000, its own group 1001 after app's 1000) in
	// sudo and app, with its keys and a sudo rule.
	assert.Contains(t, f.read("/etc/passwd"), "ops:x:1000:1001::/home/ops:/bin/bash\n")
	assert.Contains(t, f.read("/etc/group"), "sudo:x:27:ops\n")
	assert.Contains(t, f.read("/etc/group"), "app:x:1000:ops\n")
	assert.Equal(t, testKey1+"\n"+testKey2+"\n", f.read("/home/ops/.ssh/authorized_keys"))
	assert.Equal(t, fs.FileMode(0o600), f.mode("/home/ops/.ssh/authorized_keys"))
	assert.Equal(t, fs.FileMode(0o700), f.mode("/home/ops/.ssh"))
	uid, gid := f.owner("/home/ops/.ssh/authorized_keys")
	assert.Equal(t, []int{1000, 1001}, []int{uid, gid})
	assert.Equal(t, "ops ALL=(ALL) NOPASSWD:ALL\n", f.read(SudoersFile))
	assert.Equal(t, fs.FileMode(0o440), f.mode(SudoersFile))

	// Storage: owned as asked, default root:root.
	assert.Equal(t, fs.FileMode(0o750), f.mode("/var/lib/app"))
	uid, gid = f.owner("/var/lib/app")
	assert.Equal(t, []int{1000, 1000}, []int{uid, gid}, "ops:app")
	assert.Equal(t, "seed data\n", f.read("/var/lib/app/seed.txt"))
	uid, gid = f.owner("/var/lib/app/seed.txt")
	assert.Equal(t, []int{1000, 0}, []int{uid, gid}, "ops:root")
	assert.Equal(t, "listen=8080\n", f.read("/etc/app/app.conf"))
	assert.Equal(t, fs.FileMode(0o640), f.mode("/etc/app/app.conf"))
	target, err := os.Readlink(f.Path("/etc/app/current"))
	require.NoError(t, err)
	assert.Equal(t, "/var/lib/app", target)

	// Units.
	assert.Equal(t, appUnit, f.read("/etc/systemd/system/app.service"))
	assert.Equal(t, "[Service]\nEnvironment=A=1\n", f.read("/etc/systemd/system/app.service.d/10-env.conf"))
	assert.Equal(t, "[Service]\nLimitNOFILE=1048576\n", f.read("/etc/systemd/system/containerd.service.d/50-limits.conf"))
	assert.NoFileExists(t, f.Path("/etc/systemd/system/containerd.service"), "the image's unit is not copied")

	require.NoError(t, Verify(ctx, f.Host, c))
	assert.Empty(t, f.take(), "verify changes nothing")

	// Again: nothing to do.
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Empty(t, f.take(), "a second apply runs no command")
	require.NoError(t, Verify(ctx, f.Host, c))
}

// A changed drop-in restarts its unit only; a changed file of storage
// restarts nothing.
func TestApplyRestartsOnlyTheUnitWhoseFilesChanged(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	require.NoError(t, Apply(ctx, f.Host, mustParse(t, fullConfig)))
	f.take()

	changed := strings.Replace(fullConfig, "LimitNOFILE=1048576", "LimitNOFILE=65536", 1)
	require.NoError(t, Apply(ctx, f.Host, mustParse(t, changed)))
	assert.Equal(t, []string{"systemctl daemon-reload", "systemctl try-restart --no-block containerd.service"}, f.take())

	// The enabled unit's own file changed: restarted and enabled again
	// (its [Install] section may have changed).
	changed = strings.Replace(changed, "Environment=A=1", "Environment=A=2", 1)
	require.NoError(t, Apply(ctx, f.Host, mustParse(t, changed)))
	assert.Equal(t, []string{"systemctl daemon-reload", "systemctl try-restart --no-block app.service", "systemctl reenable app.service"}, f.take())

	// A file the config wrote before may change without overwrite.
	changed = strings.Replace(changed, "listen%3D8080", "listen%3D9090", 1)
	c := mustParse(t, changed)
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Empty(t, f.take())
	assert.Equal(t, "listen=9090\n", f.read("/etc/app/app.conf"))
	require.NoError(t, Verify(ctx, f.Host, c))
}

// An apply cut short after a unit's files were written restarts it on the
// next apply.
func TestApplyResumesPendingRestarts(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	c := mustParse(t, fullConfig)
	require.NoError(t, Apply(ctx, f.Host, c))
	f.take()

	st, err := loadState(f.Host)
	require.NoError(t, err)
	st.Reload, st.Restart = true, []string{"containerd.service"}
	require.NoError(t, st.save(f.Host))
	err = Verify(ctx, f.Host, c)
	require.ErrorIs(t, err, ErrDrift)
	assert.Contains(t, err.Error(), "containerd.service wait for their restart")

	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, []string{"systemctl daemon-reload", "systemctl try-restart --no-block containerd.service"}, f.take())
	require.NoError(t, Verify(ctx, f.Host, c))
}

func TestApplyMaskDisableAndUnmask(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	f.write("/usr/lib/systemd/system/getty@.service", "[Service]\n")
	f.enabled["containerd.service"] = "enabled"
	c := mustParse(t, `{"ignition": {"version": "3.4.0"}, "systemd": {"units": [
		{"name": "debug-shell.service", "mask": true},
		{"name": "containerd.service", "enabled": false},
		{"name": "getty@tty1.service", "enabled": true}]}}`)
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, []string{
		"systemctl mask --now --no-block debug-shell.service",
		"systemctl disable --now --no-block containerd.service",
		"systemctl enable --now --no-block getty@tty1.service",
	}, f.take())
	require.NoError(t, Verify(ctx, f.Host, c))
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Empty(t, f.take())

	c = mustParse(t, `{"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "debug-shell.service", "mask": false}]}}`)
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, []string{"systemctl unmask debug-shell.service"}, f.take())
	require.NoError(t, Verify(ctx, f.Host, c))
}

// A file without contents is made empty when missing and otherwise keeps
// its contents; its mode and owner are set.
func TestApplyFileWithoutContents(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	f.write("/etc/kept", "keep me\n")
	c := mustParse(t, `{"ignition": {"version": "3.4.0"}, "storage": {"files": [
		{"path": "/etc/kept", "mode": 384}, {"path": "/var/new/empty", "group": {"id": 27}}]}}`)
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, "keep me\n", f.read("/etc/kept"))
	assert.Equal(t, fs.FileMode(0o600), f.mode("/etc/kept"))
	assert.Equal(t, "", f.read("/var/new/empty"))
	_, gid := f.owner("/var/new/empty")
	assert.Equal(t, 27, gid)
	require.NoError(t, Verify(ctx, f.Host, c))
}

func TestApplyOverwrite(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	f.write("/etc/motd", "old\n")
	f.write("/var/real", "x")
	require.NoError(t, os.Symlink("/var/real", f.Path("/etc/issue")))
	require.NoError(t, os.Symlink("/elsewhere", f.Path("/etc/link")))
	c := mustParse(t, `{"ignition": {"version": "3.4.0"}, "storage": {
		"files": [{"path": "/etc/motd", "overwrite": true, "contents": {"source": "data:,new"}},
		          {"path": "/etc/issue", "overwrite": true, "contents": {"source": "data:,issue"}}],
		"links": [{"path": "/etc/link", "target": "/var/real", "overwrite": true}]}}`)
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, "new", f.read("/etc/motd"))
	assert.Equal(t, "issue", f.read("/etc/issue"))
	assert.Equal(t, "x", f.read("/var/real"), "the link is replaced, not what it points to")
	target, err := os.Readlink(f.Path("/etc/link"))
	require.NoError(t, err)
	assert.Equal(t, "/var/real", target)
	require.NoError(t, Verify(ctx, f.Host, c))
}

// A changed account of the config is modified, not made again.
func TestApplyModifiesItsUser(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	require.NoError(t, Apply(ctx, f.Host, mustParse(t, fullConfig)))
	f.take()
	changed := strings.Replace(fullConfig, `"groups": ["sudo", "app"]`, `"groups": ["app"]`, 1)
	c := mustParse(t, changed)
	require.NoError(t, Apply(ctx, f.Host, c))
	assert.Equal(t, []string{"usermod --groups app ops"}, f.take())
	assert.NoFileExists(t, f.Path(SudoersFile), "ops left the sudo group")
	require.NoError(t, Verify(ctx, f.Host, c))
}

func TestVerifyFindsDrift(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	c := mustParse(t, fullConfig)
	require.NoError(t, Apply(ctx, f.Host, c))
	f.take()
	f.write("/etc/app/app.conf", "edited\n")
	require.NoError(t, os.Chmod(f.Path("/var/lib/app"), 0o755))
	f.write("/home/ops/.ssh/authorized_keys", testKey1+"\n")
	f.enabled["app.service"] = "disabled"

	err := Verify(ctx, f.Host, c)
	require.ErrorIs(t, err, ErrDrift)
	for _, s := range []string{
		"$.storage.files[1]: /etc/app/app.conf differs from the config",
		"$.storage.directories[0]: /var/lib/app has mode 0755, not 0750",
		"$.passwd.users[0].sshAuthorizedKeys: /home/ops/.ssh/authorized_keys differs",
		"$.systemd.units[0]: app.service is disabled, not enabled",
	} {
		assert.Contains(t, err.Error(), s)
	}
	assert.Empty(t, f.take(), "verify changes nothing")
}

func TestPhase(t *testing.T) {
	ctx := context.Background()
	f := newFakeHost(t)
	p := Phase(f.Host, mustParse(t, fullConfig))
	assert.Equal(t, "ignition", p.Name)
	require.NoError(t, p.Apply(ctx, nil), "the machine config is not needed")
	require.NoError(t, p.Verify(ctx, nil))
}
