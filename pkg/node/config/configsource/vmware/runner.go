package vmware

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs a command and returns its standard output. A command that
// ran and exited non-zero gives a *CommandError; one that is not installed
// an error wrapping exec.ErrNotFound.
type Runner interface {
	Output(ctx context.Context, name string, args ...string) ([]byte, error)
}

// CommandError is a command that ran and failed.
type CommandError struct {
	Name string
	// Code is the exit status, -1 when a signal ended the command.
	Code int
	// Stderr is the start of what it wrote to standard error.
	Stderr string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s: exit status %d: %s", e.Name, e.Code, firstLine(e.Stderr))
}

// ExecRunner runs commands with os/exec. It keeps MaxValueSize+1 bytes of
// standard output and 4 KiB of standard error, and discards the rest.
type ExecRunner struct{}

var _ Runner = ExecRunner{}

// Output implements Runner.
func (ExecRunner) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	stdout, stderr := &capped{max: MaxValueSize + 1}, &capped{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return nil, &CommandError{Name: name, Code: exit.ExitCode(), Stderr: stderr.buf.String()}
	}
	if err != nil {
		return nil, err
	}
	return stdout.buf.Bytes(), nil
}

// capped keeps the first max bytes written to it and drops the rest, so
// that the command never blocks on a full pipe.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
