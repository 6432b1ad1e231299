package host

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoUser means the account files name no such user.
var ErrNoUser = errors.New("no such user")

// User is an account of /etc/passwd.
type User struct {
	UID, GID int
	Home     string
}

// LookupUser reads /etc/passwd under the host root.
func (h *Host) LookupUser(name string) (*User, error) {
	f, err := os.Open(h.Path("/etc/passwd"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) < 7 || fields[0] != name {
			continue
		}
		uid, err1 := strconv.Atoi(fields[2])
		gid, err2 := strconv.Atoi(fields[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("/etc/passwd: bad ids for %s", name)
		}
		return &User{UID: uid, GID: gid, Home: fields[5]}, nil
	}
	return nil, fmt.Errorf("user %s: %w", name, ErrNoUser)
}

// NameTaken reports which of the host's account files (/etc/passwd,
// /etc/group) already hold name; "" when neither does.
func (h *Host) NameTaken(name string) (string, error) {
	for _, file := range []string{"/etc/passwd", "/etc/group"} {
		b, err := os.ReadFile(h.Path(file))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if n, _, ok := strings.Cut(line, ":"); ok && n == name {
				return file, nil
			}
		}
	}
	return "", nil
}
