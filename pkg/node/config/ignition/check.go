package ignition

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Check tells whether c fits h, without changing anything: every reason
// Apply would stop halfway that the host can show beforehand. Its error
// is Problems of kind ErrConflict, each at its JSON path in the config and
// saying what to change.
func Check(h *host.Host, c *ignitionspec.Config) error {
	st, err := loadState(h)
	if err != nil {
		return err
	}
	acc, err := readAccounts(h)
	if err != nil {
		return err
	}
	k := &checker{h: h, c: c, st: st, acc: acc}
	k.groups()
	k.users()
	k.storage()
	k.units()
	return k.err()
}

// checker checks one config against one host.
type checker struct {
	problems
	h   *host.Host
	c   *ignitionspec.Config
	st  *state
	acc *accounts
}

func (k *checker) conflict(at, format string, args ...any) {
	k.add(ignitionspec.ErrConflict, at, format, args...)
}

func (k *checker) groups() {
	for _, g := range k.c.Groups {
		at := field(g.At, "name")
		if e, ok := k.acc.groups[g.Name]; ok {
			// An existing group is fine as a group.
			if g.GID != nil && *g.GID != e.gid {
				k.conflict(field(g.At, "gid"), "group %s exists with gid %d; remove gid, or set it to %d", g.Name, e.gid, e.gid)
			}
			continue
		}
		if _, ok := k.acc.users[g.Name]; ok && !k.c.MakesUser(g.Name) {
			k.conflict(at, "%q is already an account of this image (/etc/passwd), not a group; choose another name", g.Name)
		}
		if g.GID != nil {
			if other := k.acc.groupName(*g.GID); other != "" {
				k.conflict(field(g.At, "gid"), "gid %d is group %s's already; choose another, or remove gid", *g.GID, other)
			}
		}
	}
}

func (k *checker) users() {
	for _, u := range k.c.Users {
		k.user(u)
	}
}

func (k *checker) user(u ignitionspec.User) {
	at := field(u.At, "name")
	if !k.st.madeUser(u.Name) {
		file, err := k.h.NameTaken(u.Name)
		switch {
		case err != nil:
			k.conflict(at, "cannot check %q against this image's accounts: %v", u.Name, err)
		case file == "/etc/passwd":
			k.conflict(at, "%q is already an account of this image (/etc/passwd); choose another name", u.Name)
		case file != "" && u.MakesUserGroup():
			k.conflict(at, "%q is already a group of this image (%s), and useradd would make a group of that name; "+
				"choose another name, or set primaryGroup: %s to make it the user's group", u.Name, file, u.Name)
		}
	}
	if u.UID != nil {
		if other := k.acc.uidOwner(*u.UID); other != "" && other != u.Name {
			k.conflict(field(u.At, "uid"), "uid %d is account %s's already; choose another, or remove uid", *u.UID, other)
		}
	}
	if u.PrimaryGroup != "" {
		k.needGroup(field(u.At, "primaryGroup"), u.PrimaryGroup)
	}
	for i, g := range u.Groups {
		k.needGroup(index(field(u.At, "groups"), i), g)
	}
}

// needGroup refuses a group that neither the host nor the config has.
func (k *checker) needGroup(at, name string) {
	if _, ok := k.acc.groups[name]; ok || k.c.MakesGroup(name) {
		return
	}
	hint := "add it to passwd.groups"
	if name == "wheel" {
		hint = "Debian's administrators group is sudo"
	}
	k.conflict(at, "group %s is not on this image; %s", name, hint)
}

// needOwner refuses an owner the host will not have.
func (k *checker) needOwner(at string, o ignitionspec.Owner) {
	if _, ok := k.acc.users[o.User]; o.User != "" && !ok && !k.c.MakesUser(o.User) {
		k.conflict(field(at, "user.name"), "user %s is not on this image; add it to passwd.users", o.User)
	}
	if o.Group != "" {
		k.needGroup(field(at, "group.name"), o.Group)
	}
}

func (k *checker) storage() {
	for _, d := range k.c.Directories {
		k.needOwner(d.At, d.Owner)
		if fi := k.place(d.At, d.Path); fi != nil && !fi.IsDir() && !d.Overwrite {
			k.conflict(field(d.At, "path"), "%s exists and is not a directory; remove it, or set overwrite: true", d.Path)
		}
	}
	for _, f := range k.c.Files {
		k.needOwner(f.At, f.Owner)
		k.file(f)
	}
	for _, l := range k.c.Links {
		k.needOwner(l.At, l.Owner)
		k.link(l)
	}
}

// place checks that p's parents are (or can be made) directories, and
// returns what is at p (nil when nothing is, or when p cannot be looked
// at: that is reported).
func (k *checker) place(at, p string) fs.FileInfo {
	at = field(at, "path")
	var parents []string
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		parents = append(parents, dir)
	}
	for _, dir := range slices.Backward(parents) {
		fi, err := os.Stat(k.h.Path(dir)) // through symlinks: /home is one
		if errors.Is(err, fs.ErrNotExist) {
			break // made with its parents
		}
		if err != nil {
			k.conflict(at, "cannot look at %s: %v", dir, err)
			return nil
		}
		if !fi.IsDir() {
			k.conflict(at, "%s is under %s, which is a file on this host; remove it, or choose another path", p, dir)
			return nil
		}
	}
	fi, err := os.Lstat(k.h.Path(p))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		k.conflict(at, "cannot look at %s: %v", p, err)
		return nil
	}
	return fi
}

func (k *checker) file(f ignitionspec.File) {
	fi := k.place(f.At, f.Path)
	at := field(f.At, "path")
	switch {
	case fi == nil:
	case fi.IsDir():
		k.conflict(at, "%s is a directory on this host; choose another path", f.Path)
	case fi.Mode()&fs.ModeSymlink != 0:
		if !f.Overwrite {
			k.conflict(at, "%s is a symlink on this host; remove it, or set overwrite: true", f.Path)
		}
	case !fi.Mode().IsRegular():
		k.conflict(at, "%s is a %s on this host, not a file; choose another path", f.Path, fi.Mode().Type())
	case f.HasContents && !f.Overwrite:
		old, err := os.ReadFile(k.h.Path(f.Path))
		switch {
		case err != nil:
			k.conflict(at, "cannot read %s: %v", f.Path, err)
		case !bytes.Equal(old, f.Contents) && k.st.Written[f.Path] != digest(old):
			k.conflict(at, "%s exists with other contents; set overwrite: true to replace them", f.Path)
		}
	}
}

func (k *checker) link(l ignitionspec.Link) {
	fi := k.place(l.At, l.Path)
	at := field(l.At, "path")
	switch {
	case fi == nil:
	case fi.IsDir():
		k.conflict(at, "%s is a directory on this host; choose another path", l.Path)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(k.h.Path(l.Path))
		if err != nil {
			k.conflict(at, "cannot read the link %s: %v", l.Path, err)
		} else if target != l.Target && !l.Overwrite && k.st.Written[l.Path] != linkMark(target) {
			k.conflict(at, "%s links to %s on this host; remove it, or set overwrite: true", l.Path, target)
		}
	case !l.Overwrite:
		k.conflict(at, "%s exists on this host; remove it, or set overwrite: true", l.Path)
	}
}

func (k *checker) units() {
	for _, u := range k.c.Units {
		k.unit(u)
	}
}

func (k *checker) unit(u ignitionspec.Unit) {
	at := field(u.At, "name")
	masked := isMaskLink(k.h, u.Name)
	fi, err := os.Lstat(k.h.Path(unitPath(u.Name)))
	exists := err == nil
	switch {
	case isTrue(u.Mask):
		if exists && !masked {
			k.conflict(at, "%s is a file on this host, and masking needs its place; remove it", unitPath(u.Name))
		}
		return
	case masked && u.Mask == nil && (u.Contents != "" || isTrue(u.Enabled)):
		k.conflict(at, "%s is masked on this host; add mask: false to unmask it", u.Name)
	case u.Contents != "" && exists && !masked && !fi.Mode().IsRegular():
		k.conflict(at, "%s is not a regular file on this host; remove it", unitPath(u.Name))
	case u.Contents == "" && (u.Enabled != nil || len(u.Dropins) > 0) && !unitExists(k.h, u.Name):
		k.conflict(at, "unit %s is not on this image, and the config gives no contents for it", u.Name)
	}
	if len(u.Dropins) > 0 {
		dir := path.Dir(dropinPath(u.Name, "x"))
		if fi, err := os.Stat(k.h.Path(dir)); err == nil && !fi.IsDir() {
			k.conflict(field(u.At, "dropins"), "%s is a file on this host; remove it", dir)
		}
	}
}

// isMaskLink says a unit is masked in /etc: its file there links to
// /dev/null.
func isMaskLink(h *host.Host, name string) bool {
	target, err := os.Readlink(h.Path(unitPath(name)))
	return err == nil && target == "/dev/null"
}

// unitExists says a unit file (or its template's, for an instance) is in
// one of systemd's unit directories.
func unitExists(h *host.Host, name string) bool {
	names := []string{name}
	if t, ok := templateOf(name); ok {
		names = append(names, t)
	}
	for _, dir := range []string{ignitionspec.UnitDir, "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"} {
		for _, n := range names {
			if _, err := os.Stat(h.Path(path.Join(dir, n))); err == nil {
				return true
			}
		}
	}
	return false
}

// templateOf is the template of an instance ("getty@.service" of
// "getty@tty1.service").
func templateOf(name string) (string, bool) {
	at := strings.IndexByte(name, '@')
	dot := strings.LastIndexByte(name, '.')
	if at < 0 || dot < at || dot == at+1 {
		return "", false
	}
	return name[:at+1] + name[dot:], true
}
