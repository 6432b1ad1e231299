package ignitionspec

import (
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"golang.org/x/crypto/ssh"
)

// accountName is what useradd and groupadd take on Debian without
// --badname.
var accountName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// maxID is the largest user or group ID (2^32-2; -1 is "none").
const maxID = 1<<32 - 2

// noPassword is why passwords are refused, for errors.
const noPassword = "Terrarium accounts have no password and log in with SSH keys only (like the machine config's admin); remove it"

func (m *mapper) checkName(at, name string) {
	if !accountName.MatchString(name) {
		m.malformed(at, "%q is not an account name (lower case letters, digits, - and _, starting with a letter or _, at most 32)", name)
	}
}

// checkID refuses an ID out of range, and 0 unless root is meant (a
// file's owner may be root; a second root account may not be made).
func (m *mapper) checkID(at string, id int, rootOK bool) {
	switch {
	case id < 0 || id > maxID:
		m.malformed(at, "%d is not an ID (0 to %d)", id, maxID)
	case id == 0 && !rootOK:
		m.unsupported(at, "0 is root's; Terrarium does not make a second root account")
	}
}

func (m *mapper) groups(in []types.PasswdGroup) []Group {
	var out []Group
	for i, g := range in {
		at := index("$.passwd.groups", i)
		m.checkName(field(at, "name"), g.Name)
		if g.PasswordHash != nil {
			m.unsupported(field(at, "passwordHash"), "%s", noPassword)
		}
		if g.ShouldExist != nil && !*g.ShouldExist {
			m.unsupported(field(at, "shouldExist"), "Terrarium does not delete groups; remove the entry")
		}
		if g.Gid != nil {
			m.checkID(field(at, "gid"), *g.Gid, false)
		}
		out = append(out, Group{Name: g.Name, GID: g.Gid, System: isTrue(g.System), At: at})
	}
	return out
}

func (m *mapper) users(in []types.PasswdUser, groups []Group) []User {
	var out []User
	for i, u := range in {
		at := index("$.passwd.users", i)
		m.checkName(field(at, "name"), u.Name)
		if u.PasswordHash != nil {
			m.unsupported(field(at, "passwordHash"), "%s", noPassword)
		}
		if u.ShouldExist != nil && !*u.ShouldExist {
			m.unsupported(field(at, "shouldExist"), "Terrarium does not delete accounts; remove the entry")
		}
		user := User{
			Name: u.Name, UID: u.UID, Gecos: str(u.Gecos), HomeDir: str(u.HomeDir), Shell: str(u.Shell),
			PrimaryGroup: str(u.PrimaryGroup), NoCreateHome: isTrue(u.NoCreateHome), NoUserGroup: isTrue(u.NoUserGroup),
			NoLogInit: isTrue(u.NoLogInit), System: isTrue(u.System), At: at,
		}
		if u.UID != nil {
			m.checkID(field(at, "uid"), *u.UID, false)
		}
		if strings.ContainsAny(user.Gecos, ":\n") {
			m.malformed(field(at, "gecos"), "holds a colon or a newline, which /etc/passwd cannot")
		}
		if user.Shell != "" && (!path.IsAbs(user.Shell) || path.Clean(user.Shell) != user.Shell || strings.ContainsAny(user.Shell, ":\n")) {
			m.malformed(field(at, "shell"), "%q is not an absolute, clean path", user.Shell)
		}
		if user.PrimaryGroup != "" {
			m.checkName(field(at, "primaryGroup"), user.PrimaryGroup)
		}
		for j, g := range u.Groups {
			m.checkName(index(field(at, "groups"), j), string(g))
			user.Groups = append(user.Groups, string(g))
		}
		for j, k := range u.SSHAuthorizedKeys {
			m.checkKey(index(field(at, "sshAuthorizedKeys"), j), string(k))
			user.SSHAuthorizedKeys = append(user.SSHAuthorizedKeys, string(k))
		}
		m.checkHome(at, user)
		if user.MakesUserGroup() && slices.ContainsFunc(groups, func(g Group) bool { return g.Name == user.Name }) {
			m.malformed(field(at, "name"), "passwd.groups makes a group %s too, and useradd would make the user's own; "+
				"set primaryGroup: %s (or noUserGroup: true)", user.Name, user.Name)
		}
		out = append(out, user)
	}
	return out
}

// MakesUserGroup says useradd makes a group named like the user.
func (u User) MakesUserGroup() bool { return u.PrimaryGroup == "" && !u.NoUserGroup }

// MakesGroup says the config makes a group of that name: in passwd.groups,
// or as a user's own group.
func (c *Config) MakesGroup(name string) bool {
	return slices.ContainsFunc(c.Groups, func(g Group) bool { return g.Name == name }) ||
		slices.ContainsFunc(c.Users, func(u User) bool { return u.Name == name && u.MakesUserGroup() })
}

// MakesUser says the config makes an account of that name.
func (c *Config) MakesUser(name string) bool {
	return slices.ContainsFunc(c.Users, func(u User) bool { return u.Name == name })
}

// checkHome refuses a home that cannot be made or hold the keys.
func (m *mapper) checkHome(at string, u User) {
	if u.HomeDir == "" {
		return
	}
	at = field(at, "homeDir")
	if !path.IsAbs(u.HomeDir) || path.Clean(u.HomeDir) != u.HomeDir || strings.ContainsAny(u.HomeDir, ":\n") {
		m.malformed(at, "%q is not an absolute, clean path", u.HomeDir)
		return
	}
	if u.NoCreateHome && len(u.SSHAuthorizedKeys) == 0 {
		return // any path, as for a system account's /nonexistent
	}
	if why := pathProblem(u.HomeDir); why != "" {
		m.unsupported(at, "%s %s", u.HomeDir, why)
	}
}

// checkKey refuses what is not one OpenSSH public key line.
func (m *mapper) checkKey(at, key string) {
	if strings.ContainsAny(key, "\r\n") {
		m.malformed(at, "holds a line break; give one key per entry")
		return
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key)); err != nil {
		m.malformed(at, "not an SSH public key (%v)", err)
	}
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
