// Package readahead copies a stream with its reading and its writing on
// two goroutines, so that what the source costs (a read from a slow
// device, a hash of what was read) and what the destination costs (a
// write through dm-crypt, a hash of what is written) overlap instead of
// taking turns. On a machine with more than one CPU a copy that hashes
// on both sides then takes about as long as its slower side, not their
// sum: an upgrade file of 850 MiB copied from a stick into the upgrade
// share, its parts checked on the way in and its digest taken on the way
// out, is the case it was written for.
//
// Copy is io.Copy's contract with a context: it returns the bytes
// written and the first error, a source's io.EOF being none. When the
// destination fails, the source is not read further than the buffers
// already in flight.
package readahead

import (
	"context"
	"errors"
	"io"
)

// Buffer sizes: BufferSize bytes each, Depth of them in flight (read
// ahead of the writer), so that the reader may be up to Depth×BufferSize
// ahead.
const (
	BufferSize = 1 << 20
	Depth      = 4
)

// chunk is one buffer handed from the reader to the writer: b holds what
// was read, err the read's error (io.EOF at the end).
type chunk struct {
	b   []byte
	err error
}

// Copy copies src to dst until src's io.EOF, an error, or ctx's end,
// reading ahead of the writes on its own goroutine, which it waits for
// before it returns. It returns the bytes written and the first error.
func Copy(ctx context.Context, dst io.Writer, src io.Reader) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	free := make(chan []byte, Depth)
	for range Depth {
		free <- make([]byte, BufferSize)
	}
	full := make(chan chunk, Depth)
	done := make(chan struct{})
	var panicked any // the reader's panic, raised again in the caller
	go func() {
		defer close(done)
		defer close(full)
		defer func() { panicked = recover() }()
		read(ctx, src, free, full)
	}()
	// However the writer ends (a panic in dst too), the reader is
	// stopped, at its next buffer, and waited for: src is never read
	// after Copy returns.
	defer func() {
		cancel()
		<-done
		if panicked != nil {
			panic(panicked)
		}
	}()
	return write(ctx, dst, free, full)
}

// read fills free buffers from src and hands them over on full, ending
// after it handed over an error (io.EOF too) or when ctx ends.
func read(ctx context.Context, src io.Reader, free chan []byte, full chan<- chunk) {
	for {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return
		}
		var c chunk
		if err := ctx.Err(); err != nil {
			c.err = err
		} else {
			c = fill(src, buf)
		}
		select {
		case full <- c:
		case <-ctx.Done():
			return
		}
		if c.err != nil {
			return
		}
	}
}

// fill reads src into buf until buf is full or src fails, handing on
// src's own error (io.ReadFull would turn an io.EOF after some bytes into
// its own io.ErrUnexpectedEOF, and a source's io.ErrUnexpectedEOF would
// then look like the end).
func fill(src io.Reader, buf []byte) chunk {
	k := 0
	for k < len(buf) {
		n, err := src.Read(buf[k:])
		k += n
		if err != nil {
			return chunk{b: buf[:k], err: err}
		}
	}
	return chunk{b: buf[:k]}
}

// write writes the chunks in order, handing each buffer back once
// written, until the reader's io.EOF (nil), its error, or dst's.
func write(ctx context.Context, dst io.Writer, free chan<- []byte, full <-chan chunk) (int64, error) {
	var n int64
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-full:
		case <-ctx.Done():
			return n, ctx.Err()
		}
		if !ok {
			return n, ctx.Err() // the reader stopped on ctx's end
		}
		if len(c.b) > 0 {
			w, err := dst.Write(c.b)
			n += int64(w)
			if err == nil && w != len(c.b) {
				err = io.ErrShortWrite
			}
			if err != nil {
				return n, err
			}
		}
		if errors.Is(c.err, io.EOF) {
			return n, nil
		}
		if c.err != nil {
			return n, c.err
		}
		free <- c.b[:cap(c.b)]
	}
}
