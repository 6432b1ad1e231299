package vmware

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"time"
)

// callTimeout bounds one vmware-rpctool call: an answer takes milliseconds.
const callTimeout = 10 * time.Second

// errNoGuestinfo means guestinfo cannot be read here: vmware-rpctool is
// missing, or the machine is not a VMware VM.
var errNoGuestinfo = errors.New("no guestinfo here")

// guestinfo reads guestinfo.<key> with `vmware-rpctool "info-get
// guestinfo.<key>"`, which prints the value and a newline, or fails. ok
// is false when the key has no value: vmware-rpctool says "No value found"
// (exit status 1), or the value is empty or "null" (guestinfo keys cannot
// be deleted, only overwritten).
//
// Whether the machine is on VMware is vmware-rpctool's own answer: before
// it sends anything it checks the CPUID hypervisor signature and the
// VMware backdoor port, and off VMware it exits with status 255 ("must be
// run inside a virtual machine on a VMware hypervisor product"); where the
// backdoor answers but the RPC channel does not (QEMU's vmport), it exits
// 1 with "Failed sending message to VMware.". Every failure other than "No
// value found" is taken to mean that guestinfo is not there, and wraps
// errNoGuestinfo with what the tool said.
func (p Provider) guestinfo(ctx context.Context, key string) (value string, ok bool, err error) {
	tool := p.tool()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := p.runner().Output(cctx, tool, "info-get guestinfo."+key)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return "", false, fmt.Errorf("read guestinfo.%s: %w", key, ctxErr)
	}
	var ce *CommandError
	switch {
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return "", false, fmt.Errorf("%s did not answer within %s: %w", tool, callTimeout, errNoGuestinfo)
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("%s is not installed (package open-vm-tools): %w", tool, errNoGuestinfo)
	case errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.Stderr), "no value found"):
		return "", false, nil
	case errors.As(err, &ce):
		return "", false, fmt.Errorf("not on VMware (%w): %w", ce, errNoGuestinfo)
	case err != nil:
		return "", false, fmt.Errorf("read guestinfo.%s: %w", key, err)
	case len(out) > MaxValueSize:
		return "", false, fmt.Errorf("guestinfo.%s is more than %d bytes: %w", key, MaxValueSize, ErrTooLarge)
	}
	value = strings.TrimSuffix(string(out), "\n")
	if v := strings.TrimSpace(value); v == "" || v == "null" {
		return "", false, nil
	}
	return value, true, nil
}

func (p Provider) tool() string {
	if p.Tool == "" {
		return DefaultTool
	}
	return p.Tool
}

func (p Provider) runner() Runner {
	if p.Runner == nil {
		return ExecRunner{}
	}
	return p.Runner
}

func isNoGuestinfo(err error) bool { return errors.Is(err, errNoGuestinfo) }
