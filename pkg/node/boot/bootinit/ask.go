package bootinit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// consoleAsker asks a person at the kernel's consoles (a screen and
// keyboard, a serial line) for a line, without echoing it: the first
// console that answers wins.
type consoleAsker struct {
	// active lists the consoles (/sys/class/tty/console/active).
	active string
}

// errNoConsole means no console can be read.
var errNoConsole = errors.New("no console to read from")

// ask writes prompt to every console and returns the first line one of
// them answers.
func (c consoleAsker) ask(ctx context.Context, prompt string) (string, error) {
	b, _ := os.ReadFile(c.active)
	names := strings.Fields(string(b))
	if len(names) == 0 {
		names = []string{"console"}
	}
	type answer struct {
		line string
		err  error
	}
	answers := make(chan answer, len(names))
	var open []*os.File
	defer func() {
		for _, f := range open {
			_ = f.Close() // unblocks its reader
		}
	}()
	var restores []func()
	defer func() {
		for _, r := range restores {
			r() // before the close above
		}
	}()
	for _, n := range names {
		f, err := os.OpenFile("/dev/"+n, os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			continue
		}
		open = append(open, f)
		restores = append(restores, quiet(f))
		_, _ = f.WriteString(prompt) // best effort, console by console
		go func() {
			line, err := bufio.NewReader(f).ReadString('\n')
			if err == nil {
				_, _ = f.WriteString("\r\n") // the echo's newline
			}
			answers <- answer{line, err}
		}()
	}
	if len(open) == 0 {
		return "", errNoConsole
	}
	var last error
	for range open {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case a := <-answers:
			if a.err == nil {
				return strings.TrimRight(a.line, "\r\n"), nil
			}
			last = a.err
		}
	}
	return "", fmt.Errorf("%w: %w", errNoConsole, last)
}

// quiet turns off a terminal's echo, in line mode with carriage returns
// read as newlines, and returns what puts it back; on a file that is not a
// terminal it does nothing.
// (It goes through SyscallConn, not Fd, which would make the file
// blocking and its Close unable to wake a reader.)
func quiet(f *os.File) (restore func()) {
	rc, err := f.SyscallConn()
	if err != nil {
		return func() {}
	}
	var old *unix.Termios
	_ = rc.Control(func(fd uintptr) {
		o, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil {
			return
		}
		t := *o
		t.Lflag = t.Lflag&^(unix.ECHO|unix.ECHONL) | unix.ICANON
		t.Iflag |= unix.ICRNL
		if unix.IoctlSetTermios(int(fd), unix.TCSETS, &t) == nil {
			old = o
		}
	})
	if old == nil {
		return func() {}
	}
	return func() {
		_ = rc.Control(func(fd uintptr) { _ = unix.IoctlSetTermios(int(fd), unix.TCSETS, old) })
	}
}
