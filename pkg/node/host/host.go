// Package host is the machine the node's phases act on: a root directory
// every path is read and written under, a way to run programs, and the
// node's one clock. Production uses the real root (Real); tests point Root
// at a temporary directory and hand in fakes of the small interfaces.
package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Executor runs a program and returns its combined output.
type Executor interface {
	Exec(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecFunc adapts a function into an Executor.
type ExecFunc func(ctx context.Context, name string, args ...string) ([]byte, error)

// Exec calls f.
func (f ExecFunc) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return f(ctx, name, args...)
}

// Clock tells the time. A node has one, handed down from its runner.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function into a Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

// Reporter hears about long steps as they start, wait and end: firstboot
// records them in the node's journal, on the console and in its status.
type Reporter interface {
	Report(name string, result step.Result, detail string)
}

// ReporterFunc adapts a function into a Reporter.
type ReporterFunc func(name string, result step.Result, detail string)

// Report calls f.
func (f ReporterFunc) Report(name string, result step.Result, detail string) { f(name, result, detail) }

// Host is the machine acted on. Every field is required: Real sets the
// production values, tests set their own.
type Host struct {
	// Root prefixes every file path.
	Root string
	// Executor runs programs.
	Executor Executor
	// Clock is the node's one clock.
	Clock Clock
}

// Syncer is an Executor that flushes every filesystem's writes to disk
// itself, without starting sync(1): Real's does. Host.Sync runs sync(1)
// through any other Executor (a test's records it).
type Syncer interface {
	Sync() error
}

// Real acts on this machine.
func Real() *Host {
	return &Host{Root: "/", Clock: ClockFunc(time.Now), Executor: realExecutor{}}
}

// realExecutor runs programs on this machine and syncs with sync(2).
type realExecutor struct{}

func (realExecutor) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// Sync is sync(2), which does not fail.
func (realExecutor) Sync() error {
	unix.Sync()
	return nil
}

// Sync flushes every filesystem's writes to disk, as sync(1) does: with
// the Executor's own Sync when it has one (Real's calls sync(2) in
// process; starting a program costs a starved emulated node about as much
// as the flush), else by running sync.
func (h *Host) Sync(ctx context.Context) error {
	if s, ok := h.Executor.(Syncer); ok {
		return s.Sync()
	}
	return h.Run(ctx, "sync")
}

// Path maps an absolute path onto the host root.
func (h *Host) Path(p string) string { return filepath.Join(h.Root, p) }

// Now reads the host's clock.
func (h *Host) Now() time.Time { return h.Clock.Now() }

// Command runs a program and returns its combined output and error as
// they are.
func (h *Host) Command(ctx context.Context, name string, args ...string) ([]byte, error) {
	return h.Executor.Exec(ctx, name, args...)
}

// Run runs a program, failing with its output in the error.
func (h *Host) Run(ctx context.Context, name string, args ...string) error {
	out, err := h.Executor.Exec(ctx, name, args...)
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Output runs a program and returns its output, failing with the end of
// the output in the error.
func (h *Host) Output(ctx context.Context, name string, args ...string) (string, error) {
	out, err := h.Executor.Exec(ctx, name, args...)
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, LastLines(string(out), 15))
	}
	return string(out), nil
}

// LastLines keeps the end of a long command output for an error message.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WriteIfChanged writes a file atomically, only when its content differs;
// it reports whether it wrote. A file that holds the content already but
// has another mode (one an earlier release wrote looser) gets mode, and
// counts as unchanged.
func (h *Host) WriteIfChanged(p string, data []byte, mode os.FileMode) (bool, error) {
	full := h.Path(p)
	if old, err := os.ReadFile(full); err == nil && string(old) == string(data) {
		if fi, err := os.Stat(full); err == nil && fi.Mode().Perm() != mode.Perm() {
			if err := os.Chmod(full, mode); err != nil {
				return false, &os.PathError{Op: "chmod", Path: p, Err: err}
			}
		}
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return false, err
	}
	// WriteFile sets the mode itself, whatever the umask.
	if err := atomicfile.WriteFile(full, data, mode); err != nil {
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	return true, nil
}

// ErrDiffers means a file's content is not what the config renders.
var ErrDiffers = errors.New("differs from the machine config")

// FilesMatch checks that every file holds the content given (path to
// content), without changing anything: the verify half of a phase that
// writes files. Paths are checked in order, so the error is stable.
func (h *Host) FilesMatch(files map[string]string) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		b, err := os.ReadFile(h.Path(p))
		if err != nil {
			return err
		}
		if string(b) != files[p] {
			return fmt.Errorf("%s %w", p, ErrDiffers)
		}
	}
	return nil
}
