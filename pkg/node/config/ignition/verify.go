package ignition

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Verify checks that h is as c says, changing nothing: accounts, keys,
// directories, files, links, unit files and each unit's enablement (asked
// of systemctl is-enabled). Its error is Problems of kind ErrDrift.
func Verify(ctx context.Context, h *host.Host, c *ignitionspec.Config) error {
	acc, err := readAccounts(h)
	if err != nil {
		return err
	}
	st, err := loadState(h)
	if err != nil {
		return err
	}
	v := &verifier{h: h, acc: acc}
	for _, g := range c.Groups {
		v.group(g)
	}
	for _, u := range c.Users {
		v.user(u)
	}
	v.content(SudoersFile, "$.passwd.users", []byte(sudoersRules(c)), sudoersRules(c) == "")
	for _, d := range c.Directories {
		v.directory(d)
	}
	for _, f := range c.Files {
		v.file(f)
	}
	for _, l := range c.Links {
		v.link(l)
	}
	for _, u := range c.Units {
		v.unit(ctx, u)
	}
	if len(st.Restart) > 0 {
		v.drift("$.systemd.units", "%s wait for their restart", strings.Join(st.Restart, ", "))
	}
	return v.err()
}

// verifier compares one host with one config.
type verifier struct {
	problems
	h   *host.Host
	acc *accounts
}

func (v *verifier) drift(at, format string, args ...any) {
	v.add(ErrDrift, at, format, args...)
}

func (v *verifier) group(g ignitionspec.Group) {
	e, ok := v.acc.groups[g.Name]
	switch {
	case !ok:
		v.drift(g.At, "group %s does not exist", g.Name)
	case g.GID != nil && e.gid != *g.GID:
		v.drift(g.At, "group %s has gid %d, not %d", g.Name, e.gid, *g.GID)
	}
}

func (v *verifier) user(u ignitionspec.User) {
	e, ok := v.acc.users[u.Name]
	if !ok {
		v.drift(u.At, "user %s does not exist", u.Name)
		return
	}
	for _, d := range []struct{ what, want, got string }{
		{"home", u.HomeDir, e.home}, {"shell", u.Shell, e.shell}, {"gecos", u.Gecos, e.gecos},
		{"primary group", u.PrimaryGroup, v.acc.groupName(e.gid)},
	} {
		if d.want != "" && d.want != d.got {
			v.drift(u.At, "user %s has %s %q, not %q", u.Name, d.what, d.got, d.want)
		}
	}
	if u.UID != nil && e.uid != *u.UID {
		v.drift(u.At, "user %s has uid %d, not %d", u.Name, e.uid, *u.UID)
	}
	if got, want := v.acc.supplementary(u.Name), sortedCopy(u.Groups); !slices.Equal(got, want) {
		v.drift(field(u.At, "groups"), "user %s is in %v, not %v", u.Name, got, want)
	}
	if len(u.SSHAuthorizedKeys) > 0 {
		v.content(path.Join(e.home, ".ssh", "authorized_keys"), field(u.At, "sshAuthorizedKeys"), authorizedKeys(u.SSHAuthorizedKeys), false)
	}
}

// content compares a file Apply writes whole; absent says it should not
// exist.
func (v *verifier) content(p, at string, want []byte, absent bool) {
	got, err := os.ReadFile(v.h.Path(p))
	switch {
	case absent && err == nil:
		v.drift(at, "%s exists", p)
	case absent:
	case err != nil:
		v.drift(at, "%v", err)
	case !bytes.Equal(got, want):
		v.drift(at, "%s differs from the config", p)
	}
}

// meta compares what is at p with its kind, mode and owner; it returns
// what is there, nil when it differs.
func (v *verifier) meta(at, p string, kind fs.FileMode, mode fs.FileMode, o ignitionspec.Owner) fs.FileInfo {
	fi, err := os.Lstat(v.h.Path(p))
	if err != nil {
		v.drift(at, "%v", err)
		return nil
	}
	if fi.Mode().Type() != kind {
		v.drift(at, "%s is a %s, not a %s", p, typeName(fi.Mode().Type()), typeName(kind))
		return nil
	}
	if kind != fs.ModeSymlink && fi.Mode().Perm() != mode {
		v.drift(at, "%s has mode %#o, not %#o", p, fi.Mode().Perm(), mode)
	}
	uid, gid, err := v.acc.ids(o)
	if err != nil {
		v.drift(at, "owner of %s: %v", p, err)
	} else if u, g, ok := fileOwner(fi); ok && (u != uid || g != gid) {
		v.drift(at, "%s is owned by %d:%d, not %d:%d", p, u, g, uid, gid)
	}
	return fi
}

func typeName(t fs.FileMode) string {
	switch t {
	case 0:
		return "file"
	case fs.ModeDir:
		return "directory"
	case fs.ModeSymlink:
		return "symlink"
	}
	return t.String()
}

func (v *verifier) directory(d ignitionspec.Directory) {
	v.meta(d.At, d.Path, fs.ModeDir, d.Mode, d.Owner)
}

func (v *verifier) file(f ignitionspec.File) {
	if v.meta(f.At, f.Path, 0, f.Mode, f.Owner) != nil && f.HasContents {
		v.content(f.Path, f.At, f.Contents, false)
	}
}

func (v *verifier) link(l ignitionspec.Link) {
	if v.meta(l.At, l.Path, fs.ModeSymlink, 0, l.Owner) == nil {
		return
	}
	if target, err := os.Readlink(v.h.Path(l.Path)); err != nil || target != l.Target {
		v.drift(l.At, "%s does not link to %s", l.Path, l.Target)
	}
}

func (v *verifier) unit(ctx context.Context, u ignitionspec.Unit) {
	for _, f := range unitFiles(u) {
		v.content(f.path, u.At, f.contents, false)
	}
	if u.Mask == nil && u.Enabled == nil {
		return
	}
	out, err := v.h.Command(ctx, "systemctl", "is-enabled", u.Name)
	state := strings.TrimSpace(string(out))
	if state == "" && err != nil {
		v.drift(u.At, "systemctl is-enabled %s: %v", u.Name, err)
		return
	}
	var ok bool
	var want string
	switch {
	case isTrue(u.Mask):
		want, ok = "masked", state == "masked" || state == "masked-runtime"
	case u.Enabled != nil && *u.Enabled:
		want, ok = "enabled", state == "enabled"
	case u.Enabled != nil:
		want, ok = "disabled", state == "disabled" || state == "static" || state == "indirect"
	default:
		want, ok = "unmasked", state != "masked"
	}
	if !ok {
		v.drift(u.At, "%s is %s, not %s", u.Name, state, want)
	}
}
