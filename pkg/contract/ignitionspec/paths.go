package ignitionspec

import (
	"path"
	"strings"
)

// UnitDir is where a config's units and their drop-ins are written; its
// terrarium-* files are Terrarium's own, which a config may not write.
const UnitDir = "/etc/systemd/system"

// writableTrees names the trees of the appliance a config may write under,
// for errors.
const writableTrees = "/etc, /var, /opt, /home, /root, /srv or /usr/local"

// pathProblem says why a config may not write p, "" when it may. The root
// is the read-only slot; /etc and /var are writable, and /opt, /home,
// /root, /srv and /usr/local are symlinks into /var.
func pathProblem(p string) string {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return "is not an absolute, clean path"
	}
	top, _, _ := strings.Cut(p[1:], "/")
	switch top {
	case "etc", "var", "opt", "home", "root", "srv":
		if p == "/"+top {
			return "is a tree of the appliance itself; name a path under it"
		}
		return ownedPath(p)
	case "usr":
		switch {
		case p == "/usr/local":
			return "is a tree of the appliance itself; name a path under it"
		case strings.HasPrefix(p, "/usr/local/"):
			return ""
		}
		return "is in the read-only slot (/usr); write under " + writableTrees
	case "state":
		return "is TERRA-STATE's own mount, which Terrarium manages; write under /var (which is on TERRA-STATE)"
	case "proc", "sys", "dev":
		return "is in a kernel file system; set it at boot with a unit, /etc/sysctl.d or /etc/udev/rules.d"
	case "boot", "efi":
		return "holds the boot loader, which Terrarium's upgrades manage"
	case "run", "tmp":
		return "does not survive a reboot; write under " + writableTrees + ", or use /etc/tmpfiles.d"
	}
	return "is outside the appliance's writable trees (" + writableTrees + "): the root is the read-only slot"
}

// ownedPath says why p, in a writable tree, is Terrarium's own and not a
// config's to write, "" when it is not.
func ownedPath(p string) string {
	under := func(dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	switch {
	case p == "/etc/passwd", p == "/etc/shadow", p == "/etc/group", p == "/etc/gshadow",
		p == "/etc/subuid", p == "/etc/subgid":
		return "is written by useradd and groupadd; make accounts with passwd.users and passwd.groups"
	case p == "/etc/hostname", p == "/etc/hosts":
		return "is written from the machine config's hostname; set it there"
	case under("/etc/terrarium"), under("/var/lib/terrarium"):
		return "is Terrarium's own; configure Terrarium with the machine config"
	case strings.HasPrefix(p, "/etc/sudoers.d/terrarium-"):
		return "is Terrarium's own sudo rule; add the user to the sudo group instead"
	case strings.HasPrefix(p, "/etc/systemd/network/10-terrarium-"):
		return "is written from the machine config's network; set it there, or use another name"
	case strings.HasPrefix(p, UnitDir+"/terrarium-"):
		return "is one of Terrarium's own units"
	}
	return ""
}
