// Package release describes the build a slot holds: /usr/lib/terrarium/release.json,
// written by imagebuild and read by firstboot.
package release

import (
	"encoding/json"
	"fmt"
	"os"
)

// Release is the content of release.json.
type Release struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	Suite         string `json:"suite"`
	KernelVersion string `json:"kernelVersion"`
	// BuiltAt is the build's fixed timestamp (SOURCE_DATE_EPOCH), RFC 3339.
	BuiltAt string `json:"builtAt"`
	// Faults are deliberate defects of a test build ("health").
	Faults []string `json:"faults,omitempty"`
	// BootTries is the build spec's boot.tries: how many boots a slot an
	// upgrade writes may fail before the boot loader falls back. 0 in
	// releases built before it was recorded.
	BootTries int `json:"bootTries,omitempty"`
}

// HasFault reports whether the release carries fault f.
func (r *Release) HasFault(f string) bool {
	for _, x := range r.Faults {
		if x == f {
			return true
		}
	}
	return false
}

// Marshal renders release.json.
func (r *Release) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Load reads release.json.
func Load(path string) (*Release, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read release: %w", err)
	}
	var r Release
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("parse release %s: %w", path, err)
	}
	return &r, nil
}
