package nodestate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// RequestReset asks the initramfs to format TERRA-STATE on the next boot
// (`firstboot reset`), saying when it was asked.
func (s Files) RequestReset(at time.Time) error {
	if err := s.write(ResetRequestFile, []byte("requested at "+at.UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("record the reset request: %w", err)
	}
	return nil
}

// ResetRequested reports whether a reset was requested, and what the
// request says (when it was made). A request that cannot be read is none:
// STATE is formatted only when asked in so many words.
func (s Files) ResetRequested() (string, bool) {
	b, err := s.read(ResetRequestFile, maxSmallFile)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// UpgradeRequest is what `firstboot upgrade` asks the running node to
// install (UpgradeRequestFile). The command does not write the slot
// itself: the runner, the node state's one writer, takes the request in
// its upgrade-requests controller, as it takes a TERRA-UPGRADE stick, and
// answers with an UpgradeResult.
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

// Outcomes of an upgrade (UpgradeResult.Outcome), as upgrade-result.json
// holds them: a value, once written, never changes.
const (
	// OutcomeInstalled: written into the other slot; the node reboots
	// into it (or its next boot tries it).
	OutcomeInstalled = "installed"
	// OutcomePublished: handed to the cluster's rollout, which installs
	// it node by node.
	OutcomePublished = "published"
	// OutcomeAlreadyInstalled: the node runs it, or holds it in its other
	// slot already.
	OutcomeAlreadyInstalled = "already-installed"
	// OutcomeStaged: written into the other slot, which boots once
	// armed (the cluster's rollout arms it after the drain).
	OutcomeStaged = "staged"
	// OutcomeRefused: nothing was written; the detail says why.
	OutcomeRefused = "refused"
	// OutcomeFailed: writing the other slot began and failed (a part
	// that differs from its signed manifest, a disk that returns other
	// bytes); that slot has no boot entry, and the node boots its
	// running slot as before. The detail says why.
	OutcomeFailed = "failed"
)

// UpgradeResult answers an UpgradeRequest (UpgradeResultFile).
type UpgradeResult struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"` // one of the Outcome constants
	Detail  string `json:"detail,omitempty"`
	Version string `json:"version,omitempty"`
	Slot    string `json:"slot,omitempty"`
}

// maxRequestSize bounds what is read of a request or a result.
const maxRequestSize = 64 << 10

// UpgradeRequestWaiting reports whether a request waits for the runner.
func (s Files) UpgradeRequestWaiting() (bool, error) {
	ok, err := s.exists(UpgradeRequestFile)
	if err != nil {
		return false, fmt.Errorf("look for a waiting upgrade request: %w", err)
	}
	return ok, nil
}

// PutUpgradeRequest records req for the runner (0600: it names a file of
// the node).
func (s Files) PutUpgradeRequest(req UpgradeRequest) error {
	b, err := json.MarshalIndent(req, "", "  ")
	if err != nil {
		return fmt.Errorf("record the upgrade request: %w", err)
	}
	if err := s.write(UpgradeRequestFile, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("record the upgrade request: %w", err)
	}
	return nil
}

// TakeUpgradeRequest takes the waiting request: it is removed before it is
// acted on, so that a node that dies on it does not take it again. It
// returns ErrNoUpgradeRequest when none waits, and ErrBadUpgradeRequest
// (with what was read of it) for one taken that cannot be read or names no
// upgrade file, which is to be answered; any other error leaves it there.
func (s Files) TakeUpgradeRequest() (UpgradeRequest, error) {
	var req UpgradeRequest
	b, rerr := s.read(UpgradeRequestFile, maxRequestSize)
	if errors.Is(rerr, fs.ErrNotExist) {
		return req, ErrNoUpgradeRequest
	}
	if err := s.remove(UpgradeRequestFile); err != nil {
		return req, fmt.Errorf("take the upgrade request %s: %w", UpgradeRequestFile, err)
	}
	if rerr == nil {
		rerr = json.Unmarshal(b, &req)
	}
	if rerr == nil && req.Path == "" {
		rerr = errors.New("it names no upgrade file")
	}
	if rerr != nil {
		return req, fmt.Errorf("%w: %w", ErrBadUpgradeRequest, rerr)
	}
	return req, nil
}

// AnswerUpgradeRequest records the runner's answer to a request.
func (s Files) AnswerUpgradeRequest(res UpgradeResult) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("answer the upgrade request: %w", err)
	}
	if err := s.write(UpgradeResultFile, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("answer the upgrade request: %w", err)
	}
	return nil
}

// TakeUpgradeResult returns the runner's answer to the request id, when it
// is there, and removes it. Anything else at its place (nothing yet, an
// older answer) is no answer; the error is the removal's, with the answer.
func (s Files) TakeUpgradeResult(id string) (UpgradeResult, bool, error) {
	var res UpgradeResult
	b, err := s.read(UpgradeResultFile, maxRequestSize)
	if err != nil || json.Unmarshal(b, &res) != nil || res.ID != id {
		return UpgradeResult{}, false, nil
	}
	if err := s.remove(UpgradeResultFile); err != nil {
		return res, true, fmt.Errorf("remove the upgrade answer %s: %w", UpgradeResultFile, err)
	}
	return res, true, nil
}

// RemoveUpgradeResult removes an answer left by an earlier request.
func (s Files) RemoveUpgradeResult() error {
	if err := s.remove(UpgradeResultFile); err != nil {
		return fmt.Errorf("remove the last upgrade answer %s: %w", UpgradeResultFile, err)
	}
	return nil
}
