package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ModesFile is the file, at the top of an overlay, that names the
// overlay's files whose mode in the image is not what git records (0644,
// or 0755 for an executable): one "MODE PATH" a line (octal mode, path
// from the overlay's top), "#" comments. It is not copied into the
// image. The kubelet's unit files are 0600 so (the CIS benchmark's 4.1.1).
const ModesFile = ".modes"

// fileMode is one line of ModesFile.
type fileMode struct {
	path string
	mode os.FileMode
}

// readModes reads the overlay's ModesFile; none is no line.
func readModes(overlay string) ([]fileMode, error) {
	b, err := os.ReadFile(filepath.Join(overlay, ModesFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []fileMode
	s := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s/%s:%d: %q is not MODE PATH", overlay, ModesFile, n, line)
		}
		m, err := strconv.ParseUint(f[0], 8, 32)
		if err != nil || m > 0o777 {
			return nil, fmt.Errorf("%s/%s:%d: %q is not an octal permission (0600)", overlay, ModesFile, n, f[0])
		}
		p := path.Clean(f[1])
		if path.IsAbs(f[1]) || p == "." || p == ".." || strings.HasPrefix(p, "../") || p == ModesFile {
			return nil, fmt.Errorf("%s/%s:%d: %q is not a path in the overlay", overlay, ModesFile, n, f[1])
		}
		out = append(out, fileMode{path: p, mode: os.FileMode(m)})
	}
	return out, s.Err()
}

// applyModes gives each file of modes its mode in the tree; every one must
// be a regular file the overlay put there.
func applyModes(root *os.Root, overlay string, modes []fileMode) error {
	for _, m := range modes {
		src, err := os.Lstat(filepath.Join(overlay, filepath.FromSlash(m.path)))
		if err != nil || !src.Mode().IsRegular() {
			return fmt.Errorf("%s/%s: %s is not a file of the overlay", overlay, ModesFile, m.path)
		}
		if err := root.Chmod(m.path, m.mode); err != nil {
			return fmt.Errorf("%s/%s: %w", overlay, ModesFile, err)
		}
	}
	return nil
}

// sysusersDir is where an overlay declares the image's system users
// (sysusers.d(5)).
const sysusersDir = "usr/lib/sysusers.d"

// overlayUsers are the overlay's sysusers.d files (paths in the image)
// and the users they give a fixed ID, name to UID.
func overlayUsers(overlay string) (files []string, ids map[string]int, err error) {
	matches, err := filepath.Glob(filepath.Join(overlay, sysusersDir, "*.conf"))
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(matches)
	ids = map[string]int{}
	for _, m := range matches {
		files = append(files, "/"+sysusersDir+"/"+filepath.Base(m))
		b, err := os.ReadFile(m)
		if err != nil {
			return nil, nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "u" {
				continue
			}
			uid, _, _ := strings.Cut(f[2], ":")
			if n, err := strconv.Atoi(uid); err == nil {
				ids[f[1]] = n
			}
		}
	}
	return files, ids, nil
}

// makeUsers makes the overlay's system users in the tree at rootDir with
// the tree's own systemd-sysusers (its /etc/passwd, /etc/group and
// shadow files; the epoch is their date), and checks that each declared
// with an ID has it: another account of the base holding that ID would
// give the user another, silently, and a node's files would not be its.
func makeUsers(ctx context.Context, rootDir, overlay string, epoch time.Time) error {
	files, ids, err := overlayUsers(overlay)
	if err != nil || len(files) == 0 {
		return err
	}
	cmd := exec.CommandContext(ctx, "chroot", append([]string{rootDir, "systemd-sysusers"}, files...)...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("systemd-sysusers %s: %w: %s", strings.Join(files, " "), err, b)
	}
	return checkUsers(rootDir, ids)
}

// checkUsers checks that the tree's /etc/passwd gives each user its ID.
func checkUsers(rootDir string, ids map[string]int) error {
	b, err := os.ReadFile(filepath.Join(rootDir, "etc/passwd"))
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) >= 7 {
			got[f[0]] = f[2]
		}
	}
	for name, id := range ids {
		switch uid, ok := got[name]; {
		case !ok:
			return fmt.Errorf("the image's /etc/passwd has no user %s", name)
		case uid != strconv.Itoa(id):
			return fmt.Errorf("the image's user %s has ID %s, not the %d its sysusers.d file declares (another account of the base has it?)", name, uid, id)
		}
	}
	return nil
}
