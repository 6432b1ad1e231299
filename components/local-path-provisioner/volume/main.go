// Command local-path-volume creates and removes one volume's directory for
// local-path-provisioner's helper pods, in place of upstream's setup and
// teardown shell scripts (which need a busybox image):
//
//	local-path-volume -p DIR -s BYTES -m Filesystem -a create|delete
//
// The provisioner mounts the volume's parent directory (the node's volume
// area) at the same path in the helper pod and passes these arguments. The
// program acts only on a directory named like a volume (pvc-…) directly
// inside a mounted volume area (its root holds areaMarker), never follows
// a link and never removes anything else: the helper runs as root on the
// node's disk. An area not mounted yet (a node still booting) is an error
// the provisioner retries, not a volume made on, or dropped from, the
// directory beneath it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "local-path-volume:", err)
		os.Exit(1)
	}
}

// areaMarker is at the root of a mounted volume area
// (layout.LocalVolumesMarker in Terrarium's on-disk contract).
const areaMarker = ".terrarium-volume-area"

// volumeMode is the directory's mode, as upstream's setup script makes it:
// a pod of any user may write its volume.
const volumeMode = 0o777

func run(args []string, out io.Writer) error {
	f := flag.NewFlagSet("local-path-volume", flag.ContinueOnError)
	f.SetOutput(io.Discard)
	path := f.String("p", "", "the volume's directory")
	size := f.String("s", "0", "the requested size in bytes (not enforced)")
	mode := f.String("m", "Filesystem", "the volume mode")
	action := f.String("a", "", "create or delete")
	if err := f.Parse(args); err != nil {
		return fmt.Errorf("%w (usage: -p DIR -s BYTES -m Filesystem -a create|delete)", err)
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", f.Args())
	}
	if err := checkPath(*path); err != nil {
		return err
	}
	if n, err := strconv.ParseInt(*size, 10, 64); err != nil || n < 0 {
		return fmt.Errorf("-s %q: not a size in bytes", *size)
	}
	switch *action {
	case "create":
		if *mode != "Filesystem" {
			return fmt.Errorf("-m %q: local-path volumes are directories; only Filesystem is supported", *mode)
		}
		if err := create(*path); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(out, "created %s (%s bytes requested)\n", *path, *size) // a log line; the volume is made
	case "delete":
		if err := remove(*path); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(out, "deleted %s\n", *path) // a log line; the volume is gone
	default:
		return fmt.Errorf("-a %q: want create or delete", *action)
	}
	return nil
}

// checkPath accepts only a clean absolute path to a volume's directory
// (its name starts with "pvc-") whose parent is an existing directory.
func checkPath(p string) error {
	if p == "" {
		return errors.New("-p: the volume's directory is required")
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("-p %q: not a clean absolute path", p)
	}
	parent, name := filepath.Split(p)
	if !strings.HasPrefix(name, "pvc-") {
		return fmt.Errorf("-p %q: not a volume's directory (its name must start with pvc-)", p)
	}
	st, err := os.Lstat(filepath.Clean(parent))
	if err != nil {
		return fmt.Errorf("-p %q: the volume area: %w", p, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("-p %q: the volume area %s is not a directory", p, parent)
	}
	if _, err := os.Lstat(filepath.Join(parent, areaMarker)); err != nil {
		return fmt.Errorf("-p %q: the node's volume area is not mounted on %s (no %s): firstboot mounts it; retry once the node is provisioned", p, parent, areaMarker)
	}
	return nil
}

// create makes the directory, or keeps it when it is already one (a helper
// pod run again after a failure).
func create(p string) error {
	err := os.Mkdir(p, volumeMode)
	if errors.Is(err, fs.ErrExist) {
		st, lerr := os.Lstat(p)
		if lerr != nil {
			return lerr
		}
		if !st.IsDir() {
			return fmt.Errorf("create %s: it exists and is not a directory", p)
		}
	} else if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	// Mkdir's mode passed through the umask.
	if err := os.Chmod(p, volumeMode); err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

// remove deletes the directory and what it holds; a volume already gone is
// not an error. A link in its place is removed, never followed.
func remove(p string) error {
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	if !st.IsDir() {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("delete %s: %w", p, err)
		}
		return nil
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return nil
}
