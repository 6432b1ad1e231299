package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
)

// tailLines is how many console lines errors carry.
const tailLines = 40

// console collects a serial console's output. The raw bytes go to log; a
// cleaned copy (no \r, no ANSI escapes) is kept for matching, with a cursor
// that successive Expect calls advance.
type console struct {
	log     io.Writer // raw output (console.log); may be nil
	logPath string    // named in errors
	logger  *slog.Logger

	mu       sync.Mutex
	strip    stripper
	clean    []byte
	cursor   int
	changed  chan struct{} // closed and replaced on every change
	finished string        // non-empty once no more output can come: why
}

func newConsole(log io.Writer, logPath string, logger *slog.Logger) *console {
	return &console{log: log, logPath: logPath, logger: logger, changed: make(chan struct{})}
}

// readFrom copies r into the console until r fails (EOF when QEMU exits).
func (c *console) readFrom(r io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.write(buf[:n])
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.logger.Debug("console read", "err", err)
			}
			return
		}
	}
}

func (c *console) write(p []byte) {
	if c.log != nil {
		if _, err := c.log.Write(p); err != nil {
			c.logger.Warn("writing console log", "path", c.logPath, "err", err)
		}
	}
	c.mu.Lock()
	c.clean = c.strip.append(c.clean, p)
	c.broadcastLocked()
	c.mu.Unlock()
}

// finish records that no more output will come, and why.
func (c *console) finish(why string) {
	c.mu.Lock()
	c.finished = why
	c.broadcastLocked()
	c.mu.Unlock()
}

func (c *console) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.clean)
}

// expect waits until the output after the cursor matches one of res. The
// earliest match wins (ties go to the lower index); the cursor moves past it.
func (c *console) expect(ctx context.Context, res ...*regexp.Regexp) (int, []string, error) {
	if len(res) == 0 {
		return -1, nil, errors.New("expect: no patterns")
	}
	for {
		c.mu.Lock()
		if i, m, ok := c.matchLocked(res); ok {
			c.mu.Unlock()
			return i, m, nil
		}
		changed, finished := c.changed, c.finished
		c.mu.Unlock()
		if finished != "" {
			return -1, nil, c.failure(res, errors.New(finished))
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return -1, nil, c.failure(res, ctx.Err())
		}
	}
}

func (c *console) matchLocked(res []*regexp.Regexp) (int, []string, bool) {
	window := c.clean[c.cursor:]
	best, bestLoc := -1, []int(nil)
	for i, re := range res {
		loc := re.FindSubmatchIndex(window)
		if loc != nil && (bestLoc == nil || loc[0] < bestLoc[0]) {
			best, bestLoc = i, loc
		}
	}
	if bestLoc == nil {
		return -1, nil, false
	}
	m := make([]string, len(bestLoc)/2)
	for j := range m {
		if s, e := bestLoc[2*j], bestLoc[2*j+1]; s >= 0 {
			m[j] = string(window[s:e])
		}
	}
	c.cursor += bestLoc[1]
	return best, m, true
}

func (c *console) failure(res []*regexp.Regexp, cause error) error {
	pats := make([]string, len(res))
	for i, re := range res {
		pats[i] = fmt.Sprintf("%q", re.String())
	}
	where := ""
	if c.logPath != "" {
		where = " (full log: " + c.logPath + ")"
	}
	return fmt.Errorf("console: waiting for %s: %w\n--- last %d console lines%s ---\n%s",
		strings.Join(pats, " or "), cause, tailLines, where, c.tail(tailLines))
}

// tail returns the last n lines of cleaned output.
func (c *console) tail(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lastLines(string(c.clean), n)
}

// stripper removes \r, other control characters and ANSI escape sequences
// from a byte stream. It keeps state so that sequences split across writes
// are still removed.
type stripper struct {
	state int
}

const (
	stText   = iota
	stEsc    // after ESC
	stCSI    // after ESC [
	stOSC    // after ESC ]: until BEL or ESC \
	stOSCEsc // ESC inside OSC
	stSkip1  // after ESC ( or ESC ) etc.: skip one byte
)

func (s *stripper) append(dst, p []byte) []byte {
	for _, b := range p {
		switch s.state {
		case stText:
			switch {
			case b == 0x1b:
				s.state = stEsc
			case b == '\n' || b == '\t' || b >= 0x20 && b != 0x7f:
				dst = append(dst, b)
			}
		case stEsc:
			switch b {
			case '[':
				s.state = stCSI
			case ']':
				s.state = stOSC
			case '(', ')', '*', '+', '#', '%':
				s.state = stSkip1
			default:
				s.state = stText
			}
		case stCSI:
			if b >= 0x40 && b <= 0x7e {
				s.state = stText
			}
		case stOSC:
			switch b {
			case 0x07:
				s.state = stText
			case 0x1b:
				s.state = stOSCEsc
			}
		case stOSCEsc:
			s.state = stText
			if b != '\\' {
				s.state = stOSC
			}
		case stSkip1:
			s.state = stText
		}
	}
	return dst
}
