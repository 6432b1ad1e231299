package slotinstall

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/terrarium-os/terrarium/pkg/contract/readahead"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Stream is an install whose rootfs is written from a stream that
// another writer of the same bytes checks against the signed manifest:
// a control plane copying an upgrade from a stick into its upgrade share
// writes its own slot from the same reads (Begin), so the stick is read
// and hashed once for both. The rootfs is checked by reading the slot
// back beside the other copy, read back from its own disk (Finish): two
// copies written from one checked stream, equal as each disk returns
// them, are that stream. That comparison takes the place of the slot's
// second hash, the longest step of an install under emulation.
type Stream struct {
	in  *installer
	p   plan
	dev SlotDevice
	dw  *deviceWriter
	pw  *progressWriter
	err error // a write past the rootfs's size
}

// Begin checks the upgrade as Install does, makes the target slot
// unbootable and returns the stream to write its rootfs with, from its
// first byte, and then to Finish. A target that holds the upgrade
// already (staged or installed) is not written: Begin returns an error
// wrapping upgrade.ErrAlreadyInstalled. From the first change on
// (Result.Changed, which Begin returns with its error too) until Finish
// returns nil, the target has no boot entry, and the running slot boots
// as before. The caller closes the stream.
func Begin(ctx context.Context, o Options) (*Stream, Result, error) {
	return begin(ctx, o, ops{})
}

func begin(ctx context.Context, o Options, w ops) (*Stream, Result, error) {
	if err := o.validate(); err != nil {
		return nil, Result{}, err
	}
	in := &installer{o: o, w: w, m: o.Upgrade.Manifest(), target: o.Running.Other(), start: o.Clock.Now()}
	p, err := in.prepare(ctx)
	if err != nil {
		return nil, in.res, err
	}
	if a := p.already; a != nil {
		return nil, in.res, fmt.Errorf("upgrade to %s: slot %s holds it already (%s): %w", in.m.Version, in.target, a.name.file, upgrade.ErrAlreadyInstalled)
	}
	dev, err := in.begin(ctx, p)
	if err != nil {
		return nil, in.res, err
	}
	s := &Stream{in: in, p: p, dev: dev}
	s.dw, s.pw = in.rootfsWriter(dev)
	return s, in.res, nil
}

// Part names the upgrade's part the stream takes: its rootfs.
func (s *Stream) Part() string { return s.in.rootfs.Name }

// Write writes the rootfs's next bytes into the target's partition.
func (s *Stream) Write(b []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.pw.written+int64(len(b)) > s.in.rootfs.Size {
		s.err = fmt.Errorf("write %s into %s: more than its %d bytes", s.in.rootfs.Name, s.dev.Name(), s.in.rootfs.Size)
		return 0, s.err
	}
	return s.pw.Write(b)
}

// Finish is called once the stream's other writer found every byte it
// wrote to match the signed manifest, with twin reading that writer's
// copy back from its disk: it syncs the target, reads it back beside
// twin, and writes the ESP's files and the entry (staged under
// Options.Stage) as Install does. A copy that differs from the other
// is refused with ErrCopiesDiffer, and the target stays unbootable.
func (s *Stream) Finish(ctx context.Context, twin io.Reader) (Result, error) {
	in := s.in
	if err := s.finishRootfs(ctx, twin); err != nil {
		return in.res, fmt.Errorf("upgrade to %s: %w", in.m.Version, err)
	}
	return in.finish(ctx, s.p)
}

func (s *Stream) finishRootfs(ctx context.Context, twin io.Reader) error {
	in := s.in
	switch {
	case s.err != nil:
		return s.err
	case s.dw.err != nil:
		return s.dw.err
	}
	if err := in.written(s.dev, s.pw, s.pw.written); err != nil {
		return err
	}
	in.o.Reporter.Report(reportStep, step.Writing, "rootfs written; reading it back beside its other copy")
	return readBackEqual(ctx, s.dev, twin, in.rootfs.Size)
}

// Close closes the target's partition.
func (s *Stream) Close() error { return s.dev.Close() }

// readBackEqual reads the device's first size bytes back and compares
// them with twin's, which must hold as many: each read ahead of the
// comparison.
func readBackEqual(ctx context.Context, dev SlotDevice, twin io.Reader, size int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := readahead.Copy(ctx, pw, twin)
		pw.CloseWithError(err)
	}()
	defer func() { _ = pr.Close(); <-done }()

	c := &comparer{twin: pr, buf: make([]byte, readahead.BufferSize), name: dev.Name()}
	n, err := readahead.Copy(ctx, c, io.NewSectionReader(dev, 0, size))
	switch {
	case c.err != nil:
		return c.err
	case err != nil:
		return fmt.Errorf("read back %s: %w", dev.Name(), err)
	case n != size:
		return fmt.Errorf("read back %s: %d of %d bytes: %w", dev.Name(), n, size, ErrCopiesDiffer)
	}
	if k, err := io.ReadFull(pr, c.buf[:1]); k != 0 || err != io.EOF {
		if err != nil && err != io.ErrUnexpectedEOF {
			return fmt.Errorf("read the other copy of %s: %w", dev.Name(), err)
		}
		return fmt.Errorf("%s: the other copy has more than its %d bytes: %w", dev.Name(), size, ErrCopiesDiffer)
	}
	return nil
}

// comparer compares what is written to it with twin's next bytes.
type comparer struct {
	twin io.Reader
	buf  []byte
	off  int64
	name string
	err  error
}

func (c *comparer) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		chunk := p[done:min(len(p), done+len(c.buf))]
		k, err := io.ReadFull(c.twin, c.buf[:len(chunk)])
		if i := firstDiff(chunk[:k], c.buf[:k]); i >= 0 {
			c.err = fmt.Errorf("%s differs from the other copy at byte %d: %w", c.name, c.off+int64(i), ErrCopiesDiffer)
			return done, c.err
		}
		c.off += int64(k)
		done += k
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			c.err = fmt.Errorf("%s: the other copy ends at byte %d: %w", c.name, c.off, ErrCopiesDiffer)
			return done, c.err
		}
		if err != nil {
			c.err = fmt.Errorf("read the other copy of %s at byte %d: %w", c.name, c.off, err)
			return done, c.err
		}
	}
	return done, nil
}

// firstDiff is the index of the first byte a and b differ in, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}
