package firstboot

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"os"
	"path/filepath"
	"time"
)

// Journal is firstboot's record of what it did, on TERRA-STATE. It
// survives reboots and power cuts (written to a temporary file, synced and
// renamed), so a later boot knows the node is provisioned.
type Journal struct {
	// Enrollment is the node's desired state, set when it enrolls.
	Enrollment *Enrollment `json:"enrollment,omitempty"`
	// Provisioned is set once a config was fully applied.
	Provisioned *Provisioned `json:"provisioned,omitempty"`
	Boots       []BootRecord `json:"boots"`
}

// Provisioned records the config a node was provisioned with.
type Provisioned struct {
	ConfigDigest string    `json:"configDigest"`
	At           time.Time `json:"at"`
	Boot         int       `json:"boot"`
}

// BootRecord is one boot's entry.
type BootRecord struct {
	Boot   int          `json:"boot"`
	BootID string       `json:"bootID"`
	Slot   string       `json:"slot"`
	Mode   string       `json:"mode,omitempty"` // provision or verify
	Steps  []StepRecord `json:"steps"`
	Result string       `json:"result,omitempty"`
}

// StepRecord is one completed step.
type StepRecord struct {
	Name   string    `json:"name"`
	Result string    `json:"result"` // applied, verified, failed
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

const maxBoots = 100

// LoadJournal reads the journal; a missing file is an empty journal.
func LoadJournal(path string) (*Journal, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Journal{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	var j Journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("parse journal %s: %w", path, err)
	}
	return &j, nil
}

// Save writes the journal atomically.
func (j *Journal) Save(path string) error {
	if len(j.Boots) > maxBoots {
		j.Boots = j.Boots[len(j.Boots)-maxBoots:]
	}
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o644)
}

// Current returns this boot's record, creating it for bootID if needed.
func (j *Journal) Current(bootID, slot string) *BootRecord {
	if n := len(j.Boots); n > 0 && j.Boots[n-1].BootID == bootID {
		return &j.Boots[n-1]
	}
	num := 1
	if n := len(j.Boots); n > 0 {
		num = j.Boots[n-1].Boot + 1
	}
	j.Boots = append(j.Boots, BootRecord{Boot: num, BootID: bootID, Slot: slot, Steps: []StepRecord{}})
	return &j.Boots[len(j.Boots)-1]
}
