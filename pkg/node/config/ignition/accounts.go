package ignition

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// account is an entry of /etc/passwd.
type account struct {
	uid, gid           int
	gecos, home, shell string
}

// group is an entry of /etc/group.
type group struct {
	gid     int
	members []string
}

// accounts are the host's account files, read under its root.
type accounts struct {
	users  map[string]account
	groups map[string]group
}

// readAccounts reads /etc/passwd and /etc/group under the host's root; a
// missing file has no entries.
func readAccounts(h *host.Host) (*accounts, error) {
	a := &accounts{users: map[string]account{}, groups: map[string]group{}}
	err := readColonFile(h, "/etc/passwd", 7, func(f []string) error {
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("bad ids for %s: %w", f[0], err)
		}
		a.users[f[0]] = account{uid: uid, gid: gid, gecos: f[4], home: f[5], shell: f[6]}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readColonFile(h, "/etc/group", 4, func(f []string) error {
		gid, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("bad id for %s: %w", f[0], err)
		}
		g := group{gid: gid}
		if f[3] != "" {
			g.members = strings.Split(f[3], ",")
		}
		a.groups[f[0]] = g
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// readColonFile calls entry for each line of an account file with at
// least n fields.
func readColonFile(h *host.Host, name string, n int, entry func([]string) error) error {
	b, err := os.ReadFile(h.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Split(s.Text(), ":")
		if len(f) < n || f[0] == "" {
			continue
		}
		if err := entry(f); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return s.Err()
}

// supplementary are the groups that list user as a member, sorted.
func (a *accounts) supplementary(user string) []string {
	var out []string
	for name, g := range a.groups {
		if slices.Contains(g.members, user) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// groupName is the name of the group with gid, "" when none has it.
func (a *accounts) groupName(gid int) string {
	for name, g := range a.groups {
		if g.gid == gid {
			return name
		}
	}
	return ""
}

// uidOwner is the account that has uid, "" when none has it.
func (a *accounts) uidOwner(uid int) string {
	for name, u := range a.users {
		if u.uid == uid {
			return name
		}
	}
	return ""
}

// ids resolves an owner into numeric IDs.
func (a *accounts) ids(o ignitionspec.Owner) (uid, gid int, err error) {
	uid, gid = o.UID, o.GID
	if o.User != "" {
		u, ok := a.users[o.User]
		if !ok {
			return 0, 0, fmt.Errorf("user %s: %w", o.User, host.ErrNoUser)
		}
		uid = u.uid
	}
	if o.Group != "" {
		g, ok := a.groups[o.Group]
		if !ok {
			return 0, 0, fmt.Errorf("no group %s", o.Group)
		}
		gid = g.gid
	}
	return uid, gid, nil
}
