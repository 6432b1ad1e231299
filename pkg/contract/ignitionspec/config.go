// Package ignitionspec is Terrarium's dialect of Ignition v3 (specs
// 3.0.0 to 3.5.0, the way Fedora CoreOS and Flatcar users write them):
// what of a config an appliance with a read-only root applies — files,
// directories and symlinks under the writable trees, users with SSH keys,
// groups, and systemd units with drop-ins — and the refusal of the rest.
// Both sides read it: the build side checks a config before it writes a
// config disk (pkg/contract/transpile), and the node applies the plan
// (pkg/node/config/ignition). Nothing here touches a host.
//
// Parse reads a config with the Ignition library's own parser and
// validation (github.com/coreos/ignition/v2, config/v3_5, which translates
// older 3.x specs up) and maps it into a Config: a plan that is complete
// and checked before anything is written, with every contents decoded.
// What Terrarium does not apply is refused by name in one error that lists
// every such path and what to do instead, never skipped in silence: disks,
// RAID, file systems, LUKS, kernel arguments, remote sources (the node is
// air-gapped: contents come as data: URLs), merged or replaced configs,
// passwords (accounts log in with SSH keys only), appends, hard links, and
// paths Terrarium writes itself. The library's warnings are refused too:
// each is something that would not be applied as written (an unknown key,
// a setuid bit, enabling a unit that has no [Install] section).
//
// CheckMachineConfig refuses what a config given beside a machine config
// would fight it over. Whether a plan fits a given host is the node's
// check, not this package's.
package ignitionspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	igerrors "github.com/coreos/ignition/v2/config/shared/errors"
	v3 "github.com/coreos/ignition/v2/config/v3_5"
	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// Config is what Terrarium applies of an Ignition config. Parse fills it
// and checks all of it.
type Config struct {
	// Version is the spec version the config was written in ("3.4.0").
	Version string
	// Groups are made first (groupadd), in order.
	Groups []Group
	// Users are made next (useradd), in order.
	Users []User
	// Directories, Files and Links are written after the accounts, so
	// that they may be owned by one the config makes.
	Directories []Directory
	Files       []File
	Links       []Link
	// Units are written last, under /etc/systemd/system.
	Units []Unit
}

// Owner is who owns a file, directory or link. A user or group is named
// or numbered; the zero value is root:root.
type Owner struct {
	// User names the owner; when "", UID does.
	User string
	UID  int
	// Group names the group; when "", GID does.
	Group string
	GID   int
}

// Directory is a directory of storage.directories.
type Directory struct {
	Path  string
	Mode  fs.FileMode
	Owner Owner
	// Overwrite replaces a file or symlink at Path.
	Overwrite bool
	// At is its JSON path in the config ("$.storage.files[0]"), for
	// errors; Parse sets it.
	At string
}

// File is a regular file of storage.files.
type File struct {
	Path string
	// HasContents says the config gives the contents; without them the
	// file is created empty when missing, and otherwise only its mode
	// and owner are set.
	HasContents bool
	// Contents are the file's bytes, decoded and decompressed.
	Contents []byte
	Mode     fs.FileMode
	Owner    Owner
	// Overwrite replaces a file with other contents or a symlink at Path;
	// without it, the node's check refuses them.
	Overwrite bool
	// At is its JSON path in the config ("$.storage.files[0]"), for
	// errors; Parse sets it.
	At string
}

// Link is a symbolic link of storage.links.
type Link struct {
	Path, Target string
	Owner        Owner
	// Overwrite replaces a file or another symlink at Path.
	Overwrite bool
	// At is its JSON path in the config ("$.storage.files[0]"), for
	// errors; Parse sets it.
	At string
}

// Group is a group of passwd.groups.
type Group struct {
	Name string
	// GID is the group's ID; nil lets groupadd choose.
	GID    *int
	System bool
	// At is its JSON path in the config ("$.storage.files[0]"), for
	// errors; Parse sets it.
	At string
}

// User is an account of passwd.users. Its password is locked: it logs in
// with its SSH keys.
type User struct {
	Name string
	// UID is the account's ID; nil lets useradd choose.
	UID *int
	// Gecos, HomeDir, Shell and PrimaryGroup are useradd's defaults when
	// "".
	Gecos, HomeDir, Shell, PrimaryGroup string
	// Groups are the supplementary groups. A member of sudo may run sudo
	// without a password (it has none).
	Groups []string
	// SSHAuthorizedKeys become ~/.ssh/authorized_keys.
	SSHAuthorizedKeys []string
	// NoCreateHome, NoUserGroup, NoLogInit and System are useradd's
	// options of the same names.
	NoCreateHome, NoUserGroup, NoLogInit, System bool
	// At is its JSON path in the config ("$.storage.files[0]"), for
	// errors; Parse sets it.
	At string
}

// Unit is a systemd unit of systemd.units.
type Unit struct {
	Name string
	// Contents is the unit file, written to /etc/systemd/system/NAME;
	// "" writes none (the unit is the image's).
	Contents string
	// Dropins are written to /etc/systemd/system/NAME.d/.
	Dropins []Dropin
	// Enabled enables (and starts) or disables (and stops) the unit; nil
	// leaves it as it is.
	Enabled *bool
	// Mask masks (and stops) the unit, or unmasks it; nil leaves it as
	// it is.
	Mask *bool
	// At is its JSON path in the config ("$.storage.files[0]"), for
	// errors; Parse sets it.
	At string
}

// Dropin is a drop-in of a unit.
type Dropin struct {
	Name, Contents string
}

// IsIgnition reports whether data looks like an Ignition config: a JSON
// object whose ignition.version is a string. It does not validate; a
// config of another spec than 3 is one too, so that Parse can say how to
// convert it.
func IsIgnition(data []byte) bool {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	var stub versionStub
	return json.Unmarshal(data, &stub) == nil && stub.Ignition != nil && stub.Ignition.Version != nil
}

// versionStub is the part of any Ignition config that names its spec.
type versionStub struct {
	Ignition *struct {
		Version *string `json:"version"`
	} `json:"ignition"`
}

// Parse parses and validates an Ignition config of spec 3.0.0 to 3.5.0
// and returns what Terrarium applies of it. Its errors wrap ErrMalformed,
// ErrVersion or ErrUnsupported; every problem of the config is listed in
// one Problems error, each at its JSON path.
func Parse(data []byte) (*Config, error) {
	version, err := specVersion(data)
	if err != nil {
		return nil, err
	}
	in, rpt, err := v3.ParseCompatibleVersion(data)
	var lib problems
	for _, e := range rpt.Entries {
		if e.Kind.String() == "info" {
			continue
		}
		at := ""
		if e.Marker.StartP != nil {
			at = fmt.Sprintf(" (line %d col %d)", e.Marker.StartP.Line, e.Marker.StartP.Column)
		}
		lib.malformed(jsonPath(e.Context.Path), "%s%s", e.Message, at)
	}
	switch {
	case errors.Is(err, igerrors.ErrUnknownVersion):
		return nil, fmt.Errorf("ignition config: $.ignition.version: %q: %w: write a stable spec, 3.0.0 to 3.5.0", version, ErrVersion)
	case errors.Is(err, igerrors.ErrInvalidVersion):
		return nil, fmt.Errorf("ignition config: $.ignition.version: %q: %w: not a version (as in 3.5.0)", version, ErrMalformed)
	case err != nil && !errors.Is(err, igerrors.ErrInvalid):
		return nil, fmt.Errorf("ignition config: %w: %w", ErrMalformed, err)
	case err != nil:
		if len(lib.list) == 0 {
			lib.malformed("$", "%v", err)
		}
		// Invalid to the library: what Terrarium refuses is named too,
		// as far as the config can be read.
		if json.Unmarshal(data, &in) != nil {
			return nil, lib.err()
		}
	}
	m := mapper{}
	c := m.config(in)
	c.Version = version
	// The library's findings first, then this package's, without those at
	// a path the library found wrong already (a data: URL it could not
	// decode either).
	found := map[string]bool{}
	for _, p := range lib.list {
		found[p.Path] = true
	}
	for _, p := range m.list {
		if !found[p.Path] {
			lib.list = append(lib.list, p)
		}
	}
	if err := lib.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// specVersion reads the spec version a config names, refusing what is not
// JSON, names none, or names a spec other than 3.
func specVersion(data []byte) (string, error) {
	var stub versionStub
	if err := json.Unmarshal(data, &stub); err != nil {
		return "", notJSON(data, err)
	}
	if stub.Ignition == nil || stub.Ignition.Version == nil {
		return "", fmt.Errorf(`ignition config: $.ignition.version: %w: missing (an Ignition config names its spec: {"ignition": {"version": "3.5.0"}})`, ErrMalformed)
	}
	v := *stub.Ignition.Version
	major, _, _ := strings.Cut(v, ".")
	switch major {
	case "3":
		return v, nil
	case "1", "2":
		return "", fmt.Errorf("ignition config: $.ignition.version: %q: %w: this is an Ignition spec %s config; "+
			"convert it to spec 3 with ign-converter (or write it in Butane and compile it with butane), then use the 3.x config",
			v, ErrVersion, major)
	}
	return "", fmt.Errorf("ignition config: $.ignition.version: %q: %w: Terrarium takes Ignition specs 3.0.0 to 3.5.0", v, ErrVersion)
}

// notJSON describes a JSON decoding error with the place in data of the
// byte it stopped at.
func notJSON(data []byte, err error) error {
	what, offset := "not JSON", int64(-1)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		offset = syntax.Offset
	case errors.As(err, &typ):
		what, offset = "not a JSON object", typ.Offset
	}
	// The decoder counts the bytes it read, the offending one included.
	if offset--; offset < 0 || offset >= int64(len(data)) {
		return fmt.Errorf("ignition config: %w: %s: %w", ErrMalformed, what, err)
	}
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Errorf("ignition config: %w: %s at line %d col %d (offset %d): %w", ErrMalformed, what, line, col, offset, err)
}

// mapper maps a validated config into a Config, collecting every refusal.
type mapper struct {
	problems
	// total counts the bytes of decoded contents, against maxTotalSize.
	total int
}

func (m *mapper) config(in types.Config) *Config {
	m.refuseSections(in)
	c := &Config{}
	c.Groups = m.groups(in.Passwd.Groups)
	c.Users = m.users(in.Passwd.Users, c.Groups)
	c.Directories, c.Files, c.Links = m.storage(in.Storage)
	c.Units = m.units(in.Systemd.Units)
	return c
}
