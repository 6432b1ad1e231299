package slotinstall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// ESP gives access to the EFI system partition.
type ESP interface {
	// WithESP mounts the ESP (read-write when write is true), calls fn with
	// the mount's directory, and unmounts it. What fn wrote is on the disk
	// when WithESP returns nil. bootloader.ESPLoader does this for its
	// renames (its withESP method, to be exported as WithESP).
	WithESP(write bool, fn func(dir string) error) error
}

// espState is what Install reads on the ESP before it writes anything.
type espState struct {
	loaderConf []byte           // nil when there is none
	running    []entryFile      // the running slot's entries (one, normally)
	target     []entryFile      // the target slot's entries (none or one, normally)
	staged     []entryFile      // the target slot's staged entries (Stage): none or one
	counted    []entryName      // every counted slot entry, to learn the build's tries
	leftovers  []string         // ESP paths of an interrupted install's temporary files
	oldFiles   map[string]int64 // the target's kernel and initramfs: ESP path -> size
	free       int64            // bytes free on the ESP
}

// entryFile is a slot's entry on the ESP.
type entryFile struct {
	name entryName
	entry
}

// path is the entry's ESP path.
func (e entryFile) path() string { return layout.ESPEntriesDir + "/" + e.name.file }

// readESP reads the entries, loader.conf and the target slot's files on the
// ESP mounted at dir.
func readESP(dir string, running layout.Slot, statfs func(string) (int64, error)) (espState, error) {
	st := espState{oldFiles: map[string]int64{}}
	var err error
	st.loaderConf, err = os.ReadFile(filepath.Join(dir, filepath.FromSlash(layout.ESPLoaderConf)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return espState{}, fmt.Errorf("read the ESP's %s: %w", layout.ESPLoaderConf, err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(layout.ESPEntriesDir)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return espState{}, fmt.Errorf("read the ESP's %s: %w", layout.ESPEntriesDir, err)
	}
	for _, de := range entries {
		if de.IsDir() {
			continue
		}
		if strings.HasSuffix(de.Name(), tempSuffix) && strings.HasPrefix(strings.ToLower(de.Name()), layout.ESPEntryTokenPrefix) {
			st.leftovers = append(st.leftovers, layout.ESPEntriesDir+"/"+de.Name())
			continue
		}
		if conf, ok := strings.CutSuffix(de.Name(), stagedSuffix); ok {
			// A staged entry: the target's, written by Stage for Arm
			// (none of the running slot's: nothing stages the running slot).
			if n, ok := parseEntryName(conf); ok && n.slot != running {
				data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(layout.ESPEntriesDir), de.Name()))
				if err != nil {
					return espState{}, fmt.Errorf("read the ESP's staged boot entry %s: %w", de.Name(), err)
				}
				n.file = de.Name()
				st.staged = append(st.staged, entryFile{name: n, entry: parseEntry(data)})
			}
			continue
		}
		n, ok := parseEntryName(de.Name())
		if !ok {
			continue
		}
		if n.counted {
			st.counted = append(st.counted, n)
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(layout.ESPEntriesDir), de.Name()))
		if err != nil {
			return espState{}, fmt.Errorf("read the ESP's boot entry %s: %w", de.Name(), err)
		}
		e := entryFile{name: n, entry: parseEntry(data)}
		if n.slot == running {
			st.running = append(st.running, e)
		} else {
			st.target = append(st.target, e)
		}
	}
	target := running.Other()
	for _, p := range []string{target.KernelPath(), target.InitrdPath(), target.UKIPath()} {
		for _, name := range []string{p, p + tempSuffix} {
			fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
			switch {
			case errors.Is(err, fs.ErrNotExist):
			case err != nil:
				return espState{}, fmt.Errorf("read the ESP's %s: %w", name, err)
			case name == p:
				st.oldFiles[p] = fi.Size()
			default:
				st.leftovers = append(st.leftovers, name)
				st.oldFiles[name] = fi.Size()
			}
		}
	}
	sort.Strings(st.leftovers)
	if st.free, err = statfs(dir); err != nil {
		return espState{}, fmt.Errorf("read the ESP's free space: %w", err)
	}
	return st, nil
}

// freeSpace returns the bytes an unprivileged writer may still use on the
// file system of dir.
func freeSpace(dir string) (int64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(s.Bavail) * s.Bsize, nil
}

// fatSlack is what Install allows per file for FAT's clusters and
// directory entries on top of its size.
const fatSlack = 64 << 10

// checkSpace checks that the new files (a kernel and an initramfs, or a
// UKI) fit where the target's old ones and any leftovers are (they are
// removed first).
func (st espState) checkSpace(parts ...upgrade.PartInfo) error {
	var need, old int64
	for _, p := range parts {
		need += p.Size + fatSlack
	}
	need += fatSlack // the entry
	for _, size := range st.oldFiles {
		old += size
	}
	if need > st.free+old {
		return fmt.Errorf("the slot's boot files need %d MiB, and the ESP has %d MiB free with slot files of %d MiB to replace: %w",
			mib(need), mib(st.free), mib(old), ErrESPFull)
	}
	return nil
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// ops makes Install's writes. Every creation, write, rename, removal and
// sync passes through check first, so that a test can cut the power
// between any two of them: once cut returns an error, the machine is off.
// The zero value makes them all, and reads the real free space.
type ops struct {
	cut    func(op string) error
	statfs func(dir string) (int64, error)
}

// free returns the bytes free on the file system of dir.
func (o ops) free(dir string) (int64, error) {
	if o.statfs != nil {
		return o.statfs(dir)
	}
	return freeSpace(dir)
}

func (o ops) check(op string) error {
	if o.cut == nil {
		return nil
	}
	return o.cut(op)
}

// remove removes a file that may not exist.
func (o ops) remove(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := o.check("remove " + path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// rename renames a file to a name that does not exist.
func (o ops) rename(from, to string) error {
	if err := o.check("rename " + from); err != nil {
		return err
	}
	return os.Rename(from, to)
}

// syncDir makes the creations, removals and renames in dir durable.
func (o ops) syncDir(dir string) error {
	if err := o.check("sync " + dir); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}

// mkdirAll creates dir and its parents.
func (o ops) mkdirAll(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := o.check("mkdir " + dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// writeFile creates path (which must not exist) with what fill writes,
// syncs it and drops it from the page cache, so that reading it again
// reads the disk.
func (o ops) writeFile(path string, fill func(w io.Writer) error) error {
	if err := o.check("create " + path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = fill(cutWriter{w: f, o: o, op: "write " + path})
	if err == nil {
		err = o.check("sync " + path)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		// Best effort: without it the read-back may come from the cache.
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cutWriter passes every write through ops.check.
type cutWriter struct {
	w  io.Writer
	o  ops
	op string
}

func (c cutWriter) Write(p []byte) (int, error) {
	if err := c.o.check(c.op); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// fileSHA256 returns the hex SHA-256 of the file at path.
func fileSHA256(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, readerContext{ctx: ctx, r: f}); err != nil {
		return "", &os.PathError{Op: "read", Path: path, Err: err}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readerContext stops reading when ctx is done.
type readerContext struct {
	ctx context.Context
	r   io.Reader
}

func (r readerContext) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// espPath joins an ESP path to the mount's directory.
func espPath(dir, p string) string { return filepath.Join(dir, filepath.FromSlash(p)) }
