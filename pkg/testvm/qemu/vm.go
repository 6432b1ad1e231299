package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/testvm/qmp"
)

// VM is a running (or exited) QEMU process. Create it with Start and always
// Close it.
type VM struct {
	cfg     Config
	argv    []string
	log     *slog.Logger
	cmd     *exec.Cmd
	tpm     *tpmProcess // Config.TPM's swtpm
	console *console
	logFile *os.File
	stderr  *tailBuffer

	stdinMu sync.Mutex
	stdin   *os.File

	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // valid after exited is closed

	mu      sync.Mutex
	qmp     *qmp.Client
	ports   []string // hot-plug root port -> device id occupying it ("" = free)
	closing sync.Once
}

// Start launches QEMU for cfg and returns once QEMU is up and answering QMP,
// or with an error (carrying QEMU's stderr) if it exits or ctx ends first.
// ctx bounds only the start-up; the process lives until Quit, Kill or Close.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("qemu start: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := prepareDir(cfg); err != nil {
		return nil, fmt.Errorf("qemu start: %w", err)
	}
	v := &VM{
		cfg:    cfg,
		argv:   cfg.argv(),
		log:    cfg.Logger,
		stderr: &tailBuffer{max: 64 << 10},
		exited: make(chan struct{}),
		ports:  make([]string, cfg.HotplugPorts),
	}
	if err := v.launch(); err != nil {
		return nil, fmt.Errorf("qemu start: %w", err)
	}
	if _, err := v.QMP(ctx); err != nil {
		err = errors.Join(v.startFailure(err), v.Close())
		return nil, fmt.Errorf("qemu start: %w", err)
	}
	return v, nil
}

// prepareDir creates Dir, seeds the UEFI variable store and removes a stale
// QMP socket.
func prepareDir(cfg Config) error {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	vars := filepath.Join(cfg.Dir, VarsFile)
	if _, err := os.Stat(vars); cfg.BIOS {
		// SeaBIOS keeps no variables.
	} else if errors.Is(err, os.ErrNotExist) {
		if err := copyFile(cfg.OVMFVars, vars); err != nil {
			return fmt.Errorf("seeding UEFI vars: %w", err)
		}
	} else if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(cfg.Dir, QMPSocket)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// copyFile copies src to dst atomically, owner-only.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// launch starts the process and the goroutines that serve it.
func (v *VM) launch() error {
	logPath := filepath.Join(v.cfg.Dir, ConsoleFile)
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(logFile, "\n--- %s: %s ---\n", time.Now().Format(time.RFC3339), strings.Join(v.argv, " ")); err != nil {
		_ = logFile.Close() // err says why
		return fmt.Errorf("console log: %w", err)
	}
	// On the error paths below, err says why: the closes only tidy up.
	inR, inW, err := os.Pipe()
	if err != nil {
		_ = logFile.Close()
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = logFile.Close()
		_ = inR.Close()
		_ = inW.Close()
		return err
	}
	if v.cfg.TPM {
		if v.tpm, err = startTPM(v.cfg); err != nil {
			_ = logFile.Close()
			// err says why: the closes only tidy up.
			_, _, _, _ = inR.Close(), inW.Close(), outR.Close(), outW.Close()
			return err
		}
	}
	cmd := exec.Command(v.argv[0], v.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, v.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	v.log.Debug("starting qemu", "argv", v.argv)
	err = cmd.Start()
	// The child has its own copies of these ends, or no child was started.
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = logFile.Close()
		_ = inW.Close()
		_ = outR.Close()
		if v.tpm != nil {
			v.tpm.stop() // no QEMU to serve
		}
		return err
	}
	v.cmd, v.stdin, v.logFile = cmd, inW, logFile
	v.console = newConsole(logFile, logPath, v.log)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		v.console.readFrom(outR)
	}()
	go v.reap(outR, readerDone)
	return nil
}

// reap waits for the process, lets the console reader drain, and records
// the exit.
func (v *VM) reap(outR *os.File, readerDone <-chan struct{}) {
	err := v.cmd.Wait()
	if v.tpm != nil {
		v.tpm.stop() // it ends with QEMU's connection (--terminate); if not, now
	}
	select {
	case <-readerDone:
	case <-time.After(2 * time.Second): // a leftover child holds the pipe
		_ = outR.Close() // ends the reader; the Close below then says so again
		<-readerDone
	}
	_ = outR.Close() // read only, and read to its end
	v.waitErr = err
	v.log.Debug("qemu exited", "state", v.cmd.ProcessState.String())
	why := "QEMU exited (" + v.cmd.ProcessState.String() + ")"
	if tail := lastLines(v.Stderr(), 5); tail != "" {
		why += "; its stderr ends:\n" + tail
	}
	// exited is closed first: whoever Expect wakes with "QEMU exited" must
	// already see Running() == false and the process state.
	close(v.exited)
	v.console.finish(why)
}

// startFailure explains why QMP did not come up: QEMU's exit status and
// stderr if it exited (waiting for that, since a dropped QMP connection
// usually means the process is on its way out, and a loaded host may take
// seconds to reap it), else err.
func (v *VM) startFailure(err error) error {
	select {
	case <-v.exited:
		return fmt.Errorf("QEMU exited (%s) before QMP was up; stderr:\n%s",
			v.cmd.ProcessState, strings.TrimSpace(v.Stderr()))
	case <-time.After(exitWait):
		return fmt.Errorf("waiting for QMP: %w", err)
	}
}

// exitWait is how long startFailure waits for QEMU to exit.
const exitWait = 10 * time.Second

// CommandLine returns the full command line, binary first.
func (v *VM) CommandLine() []string { return append([]string(nil), v.argv...) }

// Dir returns the machine's state directory (absolute).
func (v *VM) Dir() string { return v.cfg.Dir }

// ConsoleLog returns the path of the raw console log.
func (v *VM) ConsoleLog() string { return filepath.Join(v.cfg.Dir, ConsoleFile) }

// Stderr returns (the last 64 KiB of) what QEMU wrote to stderr.
func (v *VM) Stderr() string { return v.stderr.String() }

// Pid returns QEMU's process ID (for measuring its CPU time from the host).
func (v *VM) Pid() int { return v.cmd.Process.Pid }

// Running reports whether the process has not exited yet.
func (v *VM) Running() bool {
	select {
	case <-v.exited:
		return false
	default:
		return true
	}
}

// Exited is closed when the process has exited.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// ProcessState returns the exit status, or nil while QEMU runs.
func (v *VM) ProcessState() *os.ProcessState {
	if v.Running() {
		return nil
	}
	return v.cmd.ProcessState
}

// Wait waits for QEMU to exit. It returns nil for exit status 0 and an
// error with the status and stderr otherwise.
func (v *VM) Wait(ctx context.Context) error {
	select {
	case <-v.exited:
	case <-ctx.Done():
		return fmt.Errorf("qemu wait: %w", ctx.Err())
	}
	if v.waitErr != nil {
		return fmt.Errorf("qemu: %w; stderr:\n%s", v.waitErr, v.Stderr())
	}
	return nil
}

// Kill sends SIGKILL to QEMU's process group. It does not wait.
func (v *VM) Kill() error {
	if !v.Running() {
		return nil
	}
	err := syscall.Kill(-v.cmd.Process.Pid, syscall.SIGKILL)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("qemu kill: %w", err)
	}
	return nil
}

// Close kills QEMU if it still runs, waits for it and releases everything.
// It is safe to call more than once.
func (v *VM) Close() error {
	var err error
	v.closing.Do(func() {
		err = v.Kill()
		select {
		case <-v.exited:
		case <-time.After(10 * time.Second):
			err = errors.Join(err, errors.New("qemu close: process did not exit after SIGKILL"))
			return
		}
		v.mu.Lock()
		c := v.qmp
		v.mu.Unlock()
		if c != nil {
			err = errors.Join(err, c.Close())
		}
		v.stdinMu.Lock()
		err = errors.Join(err, v.stdin.Close())
		v.stdinMu.Unlock()
		err = errors.Join(err, v.logFile.Close())
	})
	return err
}

// Console returns all console output so far, with \r and ANSI escape
// sequences removed (console.log keeps the raw bytes).
func (v *VM) Console() string { return v.console.String() }

// Expect waits until the console output after the cursor matches re, moves
// the cursor past the match and returns the match and its submatches. On
// timeout, or when QEMU exits first, the error carries the console's tail.
func (v *VM) Expect(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	_, m, err := v.console.expect(ctx, re)
	return m, err
}

// ExpectAny is Expect for several patterns: the earliest match in the output
// wins and its index in res is returned.
func (v *VM) ExpectAny(ctx context.Context, res ...*regexp.Regexp) (int, []string, error) {
	return v.console.expect(ctx, res...)
}

// SendConsole writes s to the serial console's input.
func (v *VM) SendConsole(s string) error {
	v.stdinMu.Lock()
	defer v.stdinMu.Unlock()
	if _, err := io.WriteString(v.stdin, s); err != nil {
		return fmt.Errorf("qemu console input: %w", err)
	}
	return nil
}

// lastLines returns the last n lines of s, ignoring trailing newlines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailBuffer is an io.Writer keeping the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
