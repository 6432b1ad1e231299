package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// GrowingPrefix begins the name of a blob a live layout's writer is
// still writing (layout.UpgradesDir's share, copying a stick): in
// blobs/sha256, GrowingPrefix + hex + "." + size, renamed to hex once
// whole and checked. Its writer holds an exclusive flock(2) on it from
// before it has that name until it was renamed into place or removed
// (CreateGrowing). A live layout serves such a blob as it grows, to
// readers that check what they read (WithReaderCheckedStores): a read
// past what was written waits for the writer, and fails once the writer
// let go without writing it (gave up, or a power cut left the file) or
// stalls.
const GrowingPrefix = ".grow-"

// GrowingName is the file name of a growing blob of digest hex and size
// bytes.
func GrowingName(hex string, size int64) string {
	return GrowingPrefix + hex + "." + strconv.FormatInt(size, 10)
}

// CreateGrowing creates the growing blob of digest hex and size bytes in
// the blob directory dir (blobs/sha256), in place of any a power cut
// left, and locks it as its writer. f, named by the growing name, is the
// file to write; release lets go of the blob, once it was renamed into
// place or removed: a reader that finds it let go takes what it holds as
// all its writer wrote.
func CreateGrowing(dir, hex string, size int64) (f *os.File, release func(), err error) {
	// The lock is held by a descriptor of its own, which outlives f (closed
	// before the rename into place), and is taken before the blob has its
	// name: a reader never finds it unlocked while its writer lives.
	lock, err := os.CreateTemp(dir, ".in-*")
	if err != nil {
		return nil, nil, fmt.Errorf("begin the growing blob %s: %w", hex, err)
	}
	release = func() { _ = lock.Close() } // written nothing; closing unlocks
	fail := func(err error) (*os.File, func(), error) {
		_ = os.Remove(lock.Name())
		release()
		return nil, nil, fmt.Errorf("begin the growing blob %s: %w", hex, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(err)
	}
	if err := lock.Chmod(0o644); err != nil {
		return fail(err)
	}
	name := filepath.Join(dir, GrowingName(hex, size))
	if err := os.Rename(lock.Name(), name); err != nil {
		return fail(err)
	}
	if f, err = os.OpenFile(name, os.O_WRONLY, 0); err != nil {
		_ = os.Remove(name)
		release()
		return nil, nil, fmt.Errorf("begin the growing blob %s: %w", hex, err)
	}
	return f, release, nil
}

// growPoll is how often a read past the written end looks again, and
// growStall how long it waits for the writer to write more.
const (
	growPoll  = 50 * time.Millisecond
	growStall = 2 * time.Minute
)

// openGrowing opens the growing blob of digest d in the layout l, for the
// request of ctx (its reads stop waiting for the writer when the request
// ends); ErrNotFound when there is none.
func openGrowing(ctx context.Context, l *layoutDir, d v1.Hash) (*Content, error) {
	if err := checkHash(d); err != nil {
		return nil, err
	}
	prefix := GrowingPrefix + d.Hex + "."
	names, err := fs.Glob(l.root.FS(), path.Join("blobs", d.Algorithm, prefix+"*"))
	if err != nil || len(names) != 1 {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	size, err := strconv.ParseInt(strings.TrimPrefix(path.Base(names[0]), prefix), 10, 64)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	c, err := l.open(names[0], size)
	if err != nil {
		return nil, err
	}
	f, ok := c.Body.(*os.File)
	if !ok {
		_ = c.Close() // read only
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	g := &growingBody{f: f, name: c.Path, size: size, poll: growPoll, stall: growStall, sleep: sleepCtx, ctx: ctx}
	return &Content{Body: g, Size: size, Path: c.Path}, nil
}

// growingBody reads a growing blob: Seek knows its whole size, and a
// Read past the written end waits for the writer.
type growingBody struct {
	f           *os.File
	name        string
	size, off   int64
	poll, stall time.Duration
	sleep       func(context.Context, time.Duration) error
	// ctx is the request's (an io.Reader's Read takes none).
	ctx context.Context
}

func (g *growingBody) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), g.size-g.off)]
	var waited time.Duration
	for {
		n, err := g.f.ReadAt(p, g.off)
		if n > 0 {
			g.off += int64(n)
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		// Nothing past off yet: the writer is behind, or let go.
		writing, err := g.writing()
		if err != nil {
			return 0, err
		}
		if !writing {
			// It renamed the blob into place (this same file, whole) or
			// gave up: one more read sees all it wrote.
			if n, _ = g.f.ReadAt(p, g.off); n > 0 {
				g.off += int64(n)
				return n, nil
			}
			return 0, fmt.Errorf("%s: its writer stopped at byte %d of %d", g.name, g.off, g.size)
		}
		if waited >= g.stall {
			return 0, fmt.Errorf("%s: its writer wrote nothing for %s, at byte %d of %d", g.name, g.stall, g.off, g.size)
		}
		if err := g.sleep(g.ctx, g.poll); err != nil {
			return 0, err
		}
		waited += g.poll
	}
}

// writing reports whether the blob's writer still holds it
// (CreateGrowing's lock).
func (g *growingBody) writing() (bool, error) {
	fd := int(g.f.Fd())
	switch err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("%s: ask whether its writer holds it: %w", g.name, err)
	}
	if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
		return false, fmt.Errorf("%s: let go of it: %w", g.name, err)
	}
	return false, nil
}

func (g *growingBody) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = g.off + offset
	case io.SeekEnd:
		abs = g.size + offset
	default:
		return 0, fmt.Errorf("seek %s: whence %d", g.name, whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("seek %s: to %d", g.name, abs)
	}
	g.off = abs
	return abs, nil
}

func (g *growingBody) Close() error { return g.f.Close() }

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
