package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// maxRequestSize bounds what readSmall reads.
const maxRequestSize = 64 << 10

// requestSource reads an upgrade file, or the one upgrade file on a block
// device's filesystem.
func (r *runner) requestSource(ctx context.Context, path string) upgradeSource {
	src := upgradeSource{what: path, record: "firstboot upgrade " + path}
	src.open = func(fn func(string) error) error {
		fi, err := os.Stat(r.o.Host.Path(path))
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().IsRegular():
			return fn(r.o.Host.Path(path))
		case fi.Mode()&fs.ModeDevice != 0:
			return r.upgradeFileOnMedium(ctx, media.Medium{Device: path, Label: "firstboot upgrade"})(fn)
		}
		return fmt.Errorf("%s is neither an upgrade file nor a block device", path)
	}
	return src
}

// readSmall reads a file of at most maxRequestSize bytes.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRequestSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRequestSize {
		return nil, fmt.Errorf("%s: more than %d bytes", path, maxRequestSize)
	}
	return b, nil
}

// UpgradeOptions are `firstboot upgrade`'s.
type UpgradeOptions struct {
	Host *host.Host
	Out  io.Writer
	// Path is the upgrade file or block device, as the node sees it.
	Path            string
	Force, NoReboot bool
	// Wait is how long to wait for the node's answer; Poll how often to
	// look.
	Wait, Poll time.Duration
}

// ErrUpgradeRefused means the node refused the upgrade and wrote nothing.
var ErrUpgradeRefused = errors.New("upgrade refused, nothing was written")

// ErrUpgradeFailed means the node began to write the upgrade into its
// other slot and failed: that slot has no boot entry, and the node boots
// its running slot as before.
var ErrUpgradeFailed = errors.New("upgrade failed while the other slot was written (it has no boot entry; the node boots its running slot as before)")

// RequestUpgrade asks the running node to install an upgrade file and
// waits for its answer: `firstboot upgrade FILE|DEVICE`. The node checks
// the file's signature and every part before it writes a byte, exactly as
// for a TERRA-UPGRADE stick.
func RequestUpgrade(ctx context.Context, o UpgradeOptions) (nodestate.UpgradeResult, error) {
	h := o.Host
	abs, err := filepath.Abs(o.Path)
	if err != nil {
		return nodestate.UpgradeResult{}, err
	}
	if _, err := os.Stat(h.Path(abs)); err != nil {
		return nodestate.UpgradeResult{}, fmt.Errorf("upgrade file: %w", err)
	}
	state := nodestate.On(h)
	waiting, err := state.UpgradeRequestWaiting()
	if err != nil {
		return nodestate.UpgradeResult{}, err
	}
	if waiting {
		return nodestate.UpgradeResult{}, fmt.Errorf("another upgrade request is waiting (%s); wait for it, or remove it", nodestate.UpgradeRequestFile)
	}
	req := nodestate.UpgradeRequest{Path: abs, Force: o.Force, NoReboot: o.NoReboot, ID: fmt.Sprintf("%d-%d", h.Now().UnixNano(), os.Getpid())}
	if err := state.RemoveUpgradeResult(); err != nil {
		return nodestate.UpgradeResult{}, err
	}
	if err := state.PutUpgradeRequest(req); err != nil {
		return nodestate.UpgradeResult{}, err
	}
	// The request is recorded: the node acts on it whatever these lines
	// show, and the error returned says how it went.
	_, _ = fmt.Fprintf(o.Out, "asked the node to install %s; it checks the signature and every part before it writes anything (the console shows its progress)\n", abs)
	deadline := time.NewTimer(o.Wait)
	defer deadline.Stop()
	for {
		if res, ok, err := state.TakeUpgradeResult(req.ID); ok {
			if err != nil {
				// The answer stands; the next request removes it.
				_, _ = fmt.Fprintf(o.Out, "note: %v\n", err)
			}
			switch res.Outcome {
			case nodestate.OutcomeRefused:
				return res, fmt.Errorf("%w: %s", ErrUpgradeRefused, res.Detail)
			case nodestate.OutcomeFailed:
				return res, fmt.Errorf("%w: %s", ErrUpgradeFailed, res.Detail)
			case nodestate.OutcomeInstalled:
				_, _ = fmt.Fprintf(o.Out, "%s installed into slot %s; %s\n", res.Version, res.Slot, res.Detail)
			default:
				_, _ = fmt.Fprintln(o.Out, res.Detail)
			}
			return res, nil
		}
		select {
		case <-ctx.Done():
			return nodestate.UpgradeResult{}, ctx.Err()
		case <-deadline.C:
			return nodestate.UpgradeResult{}, fmt.Errorf("no answer from the node after %s: is terrarium-firstboot.service running (firstboot status)? The request stays in %s", o.Wait, nodestate.UpgradeRequestFile)
		case <-time.After(o.Poll):
		}
	}
}
