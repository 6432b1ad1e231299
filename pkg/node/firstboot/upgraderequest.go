package firstboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// UpgradeRequest is what `firstboot upgrade` asks the running node to
// install (layout.StateUpgradeRequest). The command does not write the
// slot itself: the runner, the node state's one writer, takes the request
// in its upgrade-requests controller, as it takes a TERRA-UPGRADE stick, and answers with
// an UpgradeResult.
type UpgradeRequest struct {
	// Path is an upgrade file, or a block device whose filesystem holds
	// exactly one at its root.
	Path string `json:"path"`
	// Force installs a downgrade, the same version again, or an upgrade
	// that rolled back on this node before; never an incompatible one. On
	// a node of a cluster it forces nothing but an install on this node
	// alone while the cluster's API is out of reach: a forced rollout
	// needs a force instruction beside the file (upgrade.Instruction),
	// which forces with or without Force.
	Force bool `json:"force,omitempty"`
	// NoReboot leaves the new slot to the next boot.
	NoReboot bool `json:"noReboot,omitempty"`
	// ID tells this request's answer from an older one's.
	ID string `json:"id"`
}

// UpgradeResult answers an UpgradeRequest (layout.StateUpgradeResult).
type UpgradeResult struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"` // installed, already-installed or refused
	Detail  string `json:"detail,omitempty"`
	Version string `json:"version,omitempty"`
	Slot    string `json:"slot,omitempty"`
}

func upgradeRequestPath() string { return filepath.Join(layout.StateMount, layout.StateUpgradeRequest) }
func upgradeResultPath() string  { return filepath.Join(layout.StateMount, layout.StateUpgradeResult) }

// maxRequestSize bounds what is read of a request or a result.
const maxRequestSize = 64 << 10

// serveUpgradeRequest takes a request of `firstboot upgrade`, if there is
// one: it is removed before anything else, so that a node that dies on it
// does not take it again, and answered whatever becomes of it.
func (r *runner) serveUpgradeRequest(ctx context.Context, cfg *machineconfig.Config) {
	p := r.o.Host.Path(upgradeRequestPath())
	b, err := readSmall(p)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if rmErr := os.Remove(p); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
		r.say("upgrade request %s: %v", upgradeRequestPath(), rmErr)
		return
	}
	var req UpgradeRequest
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	if err == nil && req.Path == "" {
		err = errors.New("it names no upgrade file")
	}
	answer := func(res UpgradeResult) {
		res.ID = req.ID
		out, _ := json.MarshalIndent(res, "", "  ")
		if err := atomicfile.WriteFile(r.o.Host.Path(upgradeResultPath()), append(out, '\n'), 0o644); err != nil {
			r.say("answering the upgrade request: %v", err)
		}
	}
	if err != nil {
		r.say("upgrade request %s is unreadable, nothing was written: %v", upgradeRequestPath(), err)
		answer(UpgradeResult{Outcome: outcomeRefused, Detail: fmt.Sprintf("the request is unreadable: %v", err)})
		return
	}
	r.holdChanges("the upgrade request")
	defer r.changing.Unlock()
	policy := upgrade.Refuse
	if req.Force {
		policy = upgrade.Force
	}
	res := r.installUpgrade(ctx, cfg, r.requestSource(ctx, req.Path), policy, !req.NoReboot)
	answer(res) // before the reboot cuts the asker off
	if res.Outcome == outcomeInstalled && !req.NoReboot {
		r.rebootIntoUpgrade(ctx)
	}
}

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

// RequestUpgrade asks the running node to install an upgrade file and
// waits for its answer: `firstboot upgrade FILE|DEVICE`. The node checks
// the file's signature and every part before it writes a byte, exactly as
// for a TERRA-UPGRADE stick.
func RequestUpgrade(ctx context.Context, o UpgradeOptions) (UpgradeResult, error) {
	h := o.Host
	abs, err := filepath.Abs(o.Path)
	if err != nil {
		return UpgradeResult{}, err
	}
	if _, err := os.Stat(h.Path(abs)); err != nil {
		return UpgradeResult{}, fmt.Errorf("upgrade file: %w", err)
	}
	if _, err := os.Stat(h.Path(upgradeRequestPath())); err == nil {
		return UpgradeResult{}, fmt.Errorf("another upgrade request is waiting (%s); wait for it, or remove it", upgradeRequestPath())
	}
	req := UpgradeRequest{Path: abs, Force: o.Force, NoReboot: o.NoReboot, ID: fmt.Sprintf("%d-%d", h.Now().UnixNano(), os.Getpid())}
	b, err := json.MarshalIndent(req, "", "  ")
	if err != nil {
		return UpgradeResult{}, err
	}
	_ = os.Remove(h.Path(upgradeResultPath()))
	if err := atomicfile.WriteFile(h.Path(upgradeRequestPath()), append(b, '\n'), 0o600); err != nil {
		return UpgradeResult{}, fmt.Errorf("record the upgrade request: %w", err)
	}
	// The request is recorded: the node acts on it whatever these lines
	// show, and the error returned says how it went.
	_, _ = fmt.Fprintf(o.Out, "asked the node to install %s; it checks the signature and every part before it writes anything (the console shows its progress)\n", abs)
	deadline := time.NewTimer(o.Wait)
	defer deadline.Stop()
	for {
		if b, err := readSmall(h.Path(upgradeResultPath())); err == nil {
			var res UpgradeResult
			if json.Unmarshal(b, &res) == nil && res.ID == req.ID {
				_ = os.Remove(h.Path(upgradeResultPath()))
				switch res.Outcome {
				case outcomeRefused:
					return res, fmt.Errorf("%w: %s", ErrUpgradeRefused, res.Detail)
				case outcomeInstalled:
					_, _ = fmt.Fprintf(o.Out, "%s installed into slot %s; %s\n", res.Version, res.Slot, res.Detail)
				default:
					_, _ = fmt.Fprintln(o.Out, res.Detail)
				}
				return res, nil
			}
		}
		select {
		case <-ctx.Done():
			return UpgradeResult{}, ctx.Err()
		case <-deadline.C:
			return UpgradeResult{}, fmt.Errorf("no answer from the node after %s: is terrarium-firstboot.service running (firstboot status)? The request stays in %s", o.Wait, upgradeRequestPath())
		case <-time.After(o.Poll):
		}
	}
}
