package ignition

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// fakeHost is a machine under a temporary root with a Debian-like
// /etc/passwd and /etc/group, one unit of the image (containerd.service)
// and an Executor that records every command and acts like the real one
// on the root: groupadd and useradd append to the account files, usermod
// changes a user's groups and shell, systemctl keeps each unit's
// enablement and masks with a link to /dev/null.
type fakeHost struct {
	t *testing.T
	*host.Host

	mu   sync.Mutex
	cmds [][]string
	// enabled is what systemctl is-enabled answers for an unmasked unit.
	enabled map[string]string
}

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	f := &fakeHost{t: t, enabled: map[string]string{}}
	f.Host = &host.Host{
		Root:     t.TempDir(),
		Executor: host.ExecFunc(f.exec),
		Clock:    host.ClockFunc(func() time.Time { return time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC) }),
	}
	f.write("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"+
		"sshd:x:101:65534::/run/sshd:/usr/sbin/nologin\n")
	f.write("/etc/group", "root:x:0:\ndaemon:x:1:\nadm:x:4:\nsudo:x:27:\nusers:x:100:\nsystemd-journal:x:999:\n")
	f.write("/usr/lib/systemd/system/containerd.service", "[Service]\nExecStart=/usr/bin/containerd\n")
	require.NoError(t, os.MkdirAll(f.Path("/home"), 0o755))
	return f
}

func (f *fakeHost) write(p, content string) {
	f.t.Helper()
	require.NoError(f.t, os.MkdirAll(filepath.Dir(f.Path(p)), 0o755))
	require.NoError(f.t, os.WriteFile(f.Path(p), []byte(content), 0o644))
}

func (f *fakeHost) read(p string) string {
	f.t.Helper()
	b, err := os.ReadFile(f.Path(p))
	require.NoError(f.t, err)
	return string(b)
}

// take returns the commands run since the last take.
func (f *fakeHost) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.cmds {
		out = append(out, strings.Join(c, " "))
	}
	f.cmds = nil
	return out
}

func (f *fakeHost) exec(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !(name == "systemctl" && len(args) > 0 && args[0] == "is-enabled") {
		f.cmds = append(f.cmds, append([]string{name}, args...))
	}
	var err error
	switch name {
	case "groupadd":
		err = f.groupadd(args)
	case "useradd":
		err = f.useradd(args)
	case "usermod":
		err = f.usermod(args)
	case "systemctl":
		return f.systemctl(args)
	}
	if err != nil {
		return []byte(err.Error() + "\n"), fmt.Errorf("exit status 1")
	}
	return nil, nil
}

// flags splits an argument list into its --name value options (and bare
// --flags, with value "") and its last argument.
func flags(args []string, bare ...string) (map[string]string, string) {
	opts := map[string]string{}
	for i := 0; i < len(args)-1; i++ {
		if slices.Contains(bare, args[i]) {
			opts[args[i]] = ""
			continue
		}
		opts[args[i]] = args[i+1]
		i++
	}
	return opts, args[len(args)-1]
}

// lines reads an account file as its lines' fields.
func (f *fakeHost) lines(file string) [][]string {
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(f.read(file)), "\n") {
		out = append(out, strings.Split(l, ":"))
	}
	return out
}

func (f *fakeHost) writeLines(file string, ls [][]string) {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(strings.Join(l, ":") + "\n")
	}
	f.write(file, b.String())
}

// freeID is the first ID from 1000 that no entry of file has.
func (f *fakeHost) freeID(file string) int {
	used := map[string]bool{}
	for _, l := range f.lines(file) {
		used[l[2]] = true
	}
	id := 1000
	for used[strconv.Itoa(id)] {
		id++
	}
	return id
}

func (f *fakeHost) groupadd(args []string) error {
	opts, name := flags(args, "--system")
	gid := opts["--gid"]
	if gid == "" {
		gid = strconv.Itoa(f.freeID("/etc/group"))
	}
	for _, l := range f.lines("/etc/group") {
		if l[0] == name {
			return fmt.Errorf("groupadd: group '%s' already exists", name)
		}
	}
	f.writeLines("/etc/group", append(f.lines("/etc/group"), []string{name, "x", gid, ""}))
	return nil
}

func (f *fakeHost) useradd(args []string) error {
	opts, name := flags(args, "--create-home", "--no-create-home", "--user-group", "--no-user-group", "--system", "--no-log-init")
	for _, l := range f.lines("/etc/passwd") {
		if l[0] == name {
			return fmt.Errorf("useradd: user '%s' already exists", name)
		}
	}
	uid := opts["--uid"]
	if uid == "" {
		uid = strconv.Itoa(f.freeID("/etc/passwd"))
	}
	gid := "100"
	groups := f.lines("/etc/group")
	if _, ok := opts["--user-group"]; ok {
		gid = strconv.Itoa(f.freeID("/etc/group"))
		groups = append(groups, []string{name, "x", gid, ""})
	}
	if g := opts["--gid"]; g != "" {
		i := slices.IndexFunc(groups, func(l []string) bool { return l[0] == g })
		if i < 0 {
			return fmt.Errorf("useradd: group '%s' does not exist", g)
		}
		gid = groups[i][2]
	}
	if err := f.setGroups(groups, name, opts["--groups"]); err != nil {
		return err
	}
	home := opts["--home-dir"]
	if home == "" {
		home = "/home/" + name
	}
	f.writeLines("/etc/passwd", append(f.lines("/etc/passwd"), []string{name, "x", uid, gid, opts["--comment"], home, opts["--shell"]}))
	if _, ok := opts["--create-home"]; ok {
		u, _ := strconv.Atoi(uid)
		g, _ := strconv.Atoi(gid)
		if err := os.MkdirAll(f.Path(home), 0o750); err != nil {
			return err
		}
		return os.Chown(f.Path(home), u, g)
	}
	return nil
}

// setGroups makes user a member of exactly the comma-separated groups
// list, and writes /etc/group.
func (f *fakeHost) setGroups(groups [][]string, user, list string) error {
	want := strings.Split(list, ",")
	if list == "" {
		want = nil
	}
	for _, w := range want {
		if !slices.ContainsFunc(groups, func(l []string) bool { return l[0] == w }) {
			return fmt.Errorf("group '%s' does not exist", w)
		}
	}
	for _, l := range groups {
		var members []string
		if l[3] != "" {
			members = strings.Split(l[3], ",")
		}
		members = slices.DeleteFunc(members, func(m string) bool { return m == user })
		if slices.Contains(want, l[0]) {
			members = append(members, user)
		}
		l[3] = strings.Join(members, ",")
	}
	f.writeLines("/etc/group", groups)
	return nil
}

func (f *fakeHost) usermod(args []string) error {
	opts, name := flags(args, "--move-home")
	users := f.lines("/etc/passwd")
	i := slices.IndexFunc(users, func(l []string) bool { return l[0] == name })
	if i < 0 {
		return fmt.Errorf("usermod: user '%s' does not exist", name)
	}
	if s, ok := opts["--shell"]; ok {
		users[i][6] = s
	}
	f.writeLines("/etc/passwd", users)
	if g, ok := opts["--groups"]; ok {
		return f.setGroups(f.lines("/etc/group"), name, g)
	}
	return nil
}

func (f *fakeHost) systemctl(args []string) ([]byte, error) {
	unit := args[len(args)-1]
	link := f.Path(unitPath(unit))
	switch args[0] {
	case "is-enabled":
		if target, err := os.Readlink(link); err == nil && target == "/dev/null" {
			return []byte("masked\n"), errors.New("exit status 1")
		}
		state := f.enabled[unit]
		if state == "" {
			state = "disabled"
		}
		if state != "enabled" {
			return []byte(state + "\n"), errors.New("exit status 1")
		}
		return []byte(state + "\n"), nil
	case "enable", "reenable":
		f.enabled[unit] = "enabled"
	case "disable":
		f.enabled[unit] = "disabled"
	case "mask":
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return nil, err
		}
		return nil, os.Symlink("/dev/null", link)
	case "unmask":
		return nil, os.Remove(link)
	}
	return nil, nil
}
