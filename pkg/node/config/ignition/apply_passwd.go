package ignition

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

func (a *applier) groups(ctx context.Context) error {
	acc, err := readAccounts(a.h)
	if err != nil {
		return err
	}
	for _, g := range a.c.Groups {
		if _, ok := acc.groups[g.Name]; ok {
			continue
		}
		if !a.st.madeGroup(g.Name) {
			a.st.Groups = append(a.st.Groups, g.Name)
			if err := a.save(); err != nil {
				return err
			}
		}
		args := []string{}
		if g.GID != nil {
			args = append(args, "--gid", strconv.Itoa(*g.GID))
		}
		if g.System {
			args = append(args, "--system")
		}
		if err := a.h.Run(ctx, "groupadd", append(args, g.Name)...); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) users(ctx context.Context) error {
	acc, err := readAccounts(a.h)
	if err != nil {
		return err
	}
	for _, u := range a.c.Users {
		e, ok := acc.users[u.Name]
		if ok {
			if err := a.modifyUser(ctx, acc, u, e); err != nil {
				return err
			}
			continue
		}
		if !a.st.madeUser(u.Name) {
			a.st.Users = append(a.st.Users, u.Name)
			if err := a.save(); err != nil {
				return err
			}
		}
		// Without --password the account's password stays locked:
		// it logs in with its SSH keys.
		if err := a.h.Run(ctx, "useradd", useraddArgs(u)...); err != nil {
			return err
		}
	}
	if acc, err = readAccounts(a.h); err != nil {
		return err
	}
	for _, u := range a.c.Users {
		if err := a.authorizeKeys(acc, u); err != nil {
			return fmt.Errorf("SSH keys of %s: %w", u.Name, err)
		}
	}
	return a.sudoers()
}

func useraddArgs(u ignitionspec.User) []string {
	var args []string
	if u.UID != nil {
		args = append(args, "--uid", strconv.Itoa(*u.UID))
	}
	if u.Gecos != "" {
		args = append(args, "--comment", u.Gecos)
	}
	if u.HomeDir != "" {
		args = append(args, "--home-dir", u.HomeDir)
	}
	if u.NoCreateHome {
		args = append(args, "--no-create-home")
	} else {
		args = append(args, "--create-home")
	}
	if u.PrimaryGroup != "" {
		args = append(args, "--gid", u.PrimaryGroup)
	}
	if u.MakesUserGroup() {
		args = append(args, "--user-group")
	} else {
		args = append(args, "--no-user-group")
	}
	if len(u.Groups) > 0 {
		args = append(args, "--groups", strings.Join(u.Groups, ","))
	}
	if u.Shell != "" {
		args = append(args, "--shell", u.Shell)
	}
	if u.System {
		args = append(args, "--system")
	}
	if u.NoLogInit {
		args = append(args, "--no-log-init")
	}
	return append(args, u.Name)
}

// modifyUser brings an account Apply made before to what the config says
// now, running usermod only when something differs.
func (a *applier) modifyUser(ctx context.Context, acc *accounts, u ignitionspec.User, e account) error {
	var args []string
	if u.UID != nil && *u.UID != e.uid {
		args = append(args, "--uid", strconv.Itoa(*u.UID))
	}
	if u.Gecos != "" && u.Gecos != e.gecos {
		args = append(args, "--comment", u.Gecos)
	}
	if u.HomeDir != "" && u.HomeDir != e.home {
		args = append(args, "--home", u.HomeDir, "--move-home")
	}
	if u.Shell != "" && u.Shell != e.shell {
		args = append(args, "--shell", u.Shell)
	}
	if u.PrimaryGroup != "" && u.PrimaryGroup != acc.groupName(e.gid) {
		args = append(args, "--gid", u.PrimaryGroup)
	}
	if !slices.Equal(sortedCopy(u.Groups), acc.supplementary(u.Name)) {
		args = append(args, "--groups", strings.Join(u.Groups, ","))
	}
	if len(args) == 0 {
		return nil
	}
	return a.h.Run(ctx, "usermod", append(args, u.Name)...)
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// authorizedKeys is the authorized_keys file of keys.
func authorizedKeys(keys []string) []byte {
	return []byte(strings.Join(keys, "\n") + "\n")
}

// authorizeKeys writes a user's ~/.ssh/authorized_keys, owned by it. A
// user without keys keeps what it has.
func (a *applier) authorizeKeys(acc *accounts, u ignitionspec.User) error {
	if len(u.SSHAuthorizedKeys) == 0 {
		return nil
	}
	e, ok := acc.users[u.Name]
	if !ok {
		return fmt.Errorf("useradd made no account %s", u.Name)
	}
	sshDir := path.Join(e.home, ".ssh")
	keys := path.Join(sshDir, "authorized_keys")
	if err := os.MkdirAll(a.h.Path(sshDir), 0o700); err != nil {
		return err
	}
	if _, err := a.h.WriteIfChanged(keys, authorizedKeys(u.SSHAuthorizedKeys), 0o600); err != nil {
		return err
	}
	if err := setMeta(a.h.Path(sshDir), 0o700, e.uid, e.gid); err != nil {
		return err
	}
	return setMeta(a.h.Path(keys), 0o600, e.uid, e.gid)
}

// sudoersRules lets the config's users in the sudo group run sudo without
// a password, which they do not have; "" when none is in it.
func sudoersRules(c *ignitionspec.Config) string {
	var b strings.Builder
	for _, u := range c.Users {
		if slices.Contains(u.Groups, "sudo") {
			fmt.Fprintf(&b, "%s ALL=(ALL) NOPASSWD:ALL\n", u.Name)
		}
	}
	return b.String()
}

func (a *applier) sudoers() error {
	rules := sudoersRules(a.c)
	if rules == "" {
		if err := os.Remove(a.h.Path(SudoersFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	_, err := a.h.WriteIfChanged(SudoersFile, []byte(rules), 0o440)
	return err
}
