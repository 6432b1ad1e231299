package firstboot

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

var errNoUser = errors.New("no such user")

type user struct {
	uid, gid int
	home     string
}

// lookupUser reads /etc/passwd under the host root.
func lookupUser(h *Host, name string) (*user, error) {
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
		return &user{uid: uid, gid: gid, home: fields[5]}, nil
	}
	return nil, fmt.Errorf("user %s: %w", name, errNoUser)
}

// nameTaken reports which of the host's account files (/etc/passwd,
// /etc/group) already hold name; "" when neither does.
func nameTaken(h *Host, name string) (string, error) {
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
