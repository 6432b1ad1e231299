package ignition

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// state is what Apply did that the host cannot tell by itself, kept in
// StateFile. Apply records an intent before it acts (an account it is
// about to make, units whose files it is about to change), so that an
// apply cut short resumes where it stopped.
type state struct {
	// Users and Groups are the accounts Apply made: a second apply
	// takes them for its own, not for the image's.
	Users  []string `json:"users,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Written maps each file Apply wrote to its contents' digest, and
	// each link to "link:TARGET": a file or link still as Apply left it
	// may be replaced by a later config without overwrite.
	Written map[string]string `json:"written,omitempty"`
	// Enabled is each unit's enablement as last applied.
	Enabled map[string]bool `json:"enabled,omitempty"`
	// Reload says a unit file changed since the last daemon-reload;
	// Restart lists the units whose files changed and that are not
	// restarted yet.
	Reload  bool     `json:"reload,omitempty"`
	Restart []string `json:"restart,omitempty"`
}

func loadState(h *host.Host) (*state, error) {
	st := &state{}
	b, err := os.ReadFile(h.Path(StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", StateFile, err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("read %s: %w", StateFile, err)
	}
	return st, nil
}

func (st *state) save(h *host.Host) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	_, err = h.WriteIfChanged(StateFile, append(b, '\n'), 0o600)
	return err
}

func (st *state) madeUser(name string) bool  { return slices.Contains(st.Users, name) }
func (st *state) madeGroup(name string) bool { return slices.Contains(st.Groups, name) }

// wrote records what Apply left at a path.
func (st *state) wrote(p, what string) {
	if st.Written == nil {
		st.Written = map[string]string{}
	}
	st.Written[p] = what
}

// digest names contents in state.Written.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// linkMark names a link's target in state.Written.
func linkMark(target string) string { return "link:" + target }
