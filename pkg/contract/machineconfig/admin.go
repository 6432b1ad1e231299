package machineconfig

import (
	"fmt"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

func validateAdmin(ps *strictyaml.Problems, p strictyaml.Path, a Admin) {
	if msg := userNameProblem(a.Name); msg != "" {
		ps.Addf(p.Field("name"), "%s", msg)
	}
	kp := p.Field("sshAuthorizedKeys")
	if len(a.SSHAuthorizedKeys) == 0 {
		ps.Addf(kp, "at least one key is required, as password logins are not supported; "+
			"add a line like the contents of ~/.ssh/id_ed25519.pub")
		return
	}
	seen := map[string]strictyaml.Path{}
	for i, key := range a.SSHAuthorizedKeys {
		blob, msg := parseAuthorizedKey(key)
		if msg != "" {
			ps.Addf(kp.Index(i), "%s", msg)
			continue
		}
		if first, dup := seen[blob]; dup {
			ps.Addf(kp.Index(i), "same key as %s; remove the duplicate", first)
			continue
		}
		seen[blob] = kp.Index(i)
	}
}

// userNameProblem says what is wrong with the admin user name, or "".
func userNameProblem(name string) string {
	switch {
	case name == "":
		return fmt.Sprintf("required; leave out admin.name to get the default, %q", DefaultAdminName)
	case !isUserName(name):
		return fmt.Sprintf("%q is not a valid user name; use 1-32 characters of a-z, 0-9, '_' and '-', "+
			"starting with a letter or '_', like %q", name, DefaultAdminName)
	case isSystemUser(name):
		return fmt.Sprintf("%q is a system account; pick another name, like %q", name, DefaultAdminName)
	}
	return ""
}

// isUserName reports whether name matches ^[a-z_][a-z0-9_-]{0,31}$.
func isUserName(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for i, r := range name {
		ok := (r >= 'a' && r <= 'z') || r == '_' || (i > 0 && ((r >= '0' && r <= '9') || r == '-'))
		if !ok {
			return false
		}
	}
	return true
}

// isSystemUser reports whether name is an account the OS (Debian and its
// packages) may own, which the admin user must not take.
func isSystemUser(name string) bool {
	switch name {
	case "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail",
		"news", "uucp", "proxy", "www-data", "backup", "list", "irc", "gnats",
		"nobody", "_apt", "messagebus", "sshd", "polkitd", "tss", "uuidd",
		"dnsmasq", "_chrony", "ntpsec", "avahi", "tcpdump", "_rpc", "statd":
		return true
	}
	return strings.HasPrefix(name, "systemd-")
}
