// Package progress shows a build's stages: a bar redrawn in place on a
// terminal, plain timestamped lines otherwise (CI logs).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Stages reports progress through a fixed number of stages.
type Stages struct {
	w     io.Writer
	tty   bool
	total int
	done  int
	name  string
	start time.Time
	now   func() time.Time
}

// New reports on w; a bar is drawn when w is a terminal.
func New(w io.Writer, total int) *Stages {
	return &Stages{w: w, tty: isTerminal(w), total: total, now: time.Now}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Start begins the next stage.
func (s *Stages) Start(name string) {
	s.name, s.start = name, s.now()
	if s.tty {
		s.draw("…")
		return
	}
	_, _ = fmt.Fprintf(s.w, "[%d/%d] %s\n", s.done+1, s.total, name) // progress only, as below
}

// Done ends the current stage; note says what happened ("cached", a size).
func (s *Stages) Done(note string) {
	s.done++
	d := s.now().Sub(s.start).Round(100 * time.Millisecond)
	if s.tty {
		s.draw("")
		_, _ = fmt.Fprintf(s.w, "\r\033[K  ✓ %-28s %8s  %s\n", s.name, d, note)
		return
	}
	_, _ = fmt.Fprintf(s.w, "[%d/%d] %s: done in %s %s\n", s.done, s.total, s.name, d, note)
}

func (s *Stages) draw(suffix string) {
	const width = 24
	filled := width * s.done / max(s.total, 1)
	_, _ = fmt.Fprintf(s.w, "\r\033[K[%s%s] %d/%d %s %s", strings.Repeat("█", filled), strings.Repeat("░", width-filled), s.done, s.total, s.name, suffix)
}
