package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// GrowingPrefix begins the name of a blob a live layout's writer is
// still writing (layout.UpgradesDir's share, copying a stick): in
// blobs/sha256, GrowingPrefix + hex + "." + size, renamed to hex once
// whole and checked. A live layout serves such a blob as it grows, to
// readers that check what they read (WithReaderCheckedStores): a read
// past what was written waits for it, and fails when the writer gives
// up (the file removed, not renamed) or stalls.
const GrowingPrefix = ".grow-"

// GrowingName is the file name of a growing blob of digest hex and size
// bytes.
func GrowingName(hex string, size int64) string {
	return GrowingPrefix + hex + "." + strconv.FormatInt(size, 10)
}

// growPoll is how often a read past the written end looks again, and
// growStall how long it waits for the writer to write more.
const (
	growPoll  = 50 * time.Millisecond
	growStall = 2 * time.Minute
)

// openGrowing opens the growing blob of digest d in the layout in dir,
// ErrNotFound when there is none, for the request of ctx: its reads stop
// waiting for the writer when the request ends.
func openGrowing(ctx context.Context, dir string, d v1.Hash) (*Content, error) {
	blobs := filepath.Join(dir, "blobs", d.Algorithm)
	names, err := filepath.Glob(filepath.Join(blobs, GrowingPrefix+d.Hex+".*"))
	if err != nil || len(names) != 1 {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	size, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(names[0]), GrowingPrefix+d.Hex+"."), 10, 64)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	f, err := os.Open(names[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	g := &growingBody{f: f, grow: names[0], final: filepath.Join(blobs, d.Hex), size: size, poll: growPoll, stall: growStall, sleep: sleepCtx, ctx: ctx}
	return &Content{Body: g, Size: size, Path: names[0]}, nil
}

// growingBody reads a growing blob: Seek knows its whole size, and a
// Read past the written end waits for the writer.
type growingBody struct {
	f           *os.File
	grow, final string
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
		// Nothing past off yet: the writer is behind, or renamed the
		// blob into place (this same file, whole), or gave up.
		if _, err := os.Stat(g.grow); err != nil {
			if _, ferr := os.Stat(g.final); ferr != nil {
				return 0, fmt.Errorf("%s: its writer stopped at byte %d of %d", g.grow, g.off, g.size)
			}
			if n, _ = g.f.ReadAt(p, g.off); n > 0 {
				g.off += int64(n)
				return n, nil
			}
			return 0, fmt.Errorf("%s: renamed into place with %d of its %d bytes", g.grow, g.off, g.size)
		}
		if waited >= g.stall {
			return 0, fmt.Errorf("%s: its writer wrote nothing for %s, at byte %d of %d", g.grow, g.stall, g.off, g.size)
		}
		if err := g.sleep(g.ctx, g.poll); err != nil {
			return 0, err
		}
		waited += g.poll
	}
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
		return 0, fmt.Errorf("seek %s: whence %d", g.grow, whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("seek %s: to %d", g.grow, abs)
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
