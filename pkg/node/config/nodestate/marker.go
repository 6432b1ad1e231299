package nodestate

import (
	"fmt"
	"strings"
	"time"
)

// Marker says when TERRA-STATE was made and by what (MarkerFile): written
// once, by the initramfs when it formats STATE or by the ISO installer
// when it seeds a new disk's.
type Marker struct {
	Created time.Time
	// Slot is the slot that made it.
	Slot string
	// InstalledFrom is what installed the node, when an installer made
	// STATE ("ISO 0.2.0").
	InstalledFrom string
}

// String is the marker's line: "created=<time> slot=<slot>
// [installed-from=<what>]".
func (m Marker) String() string {
	s := fmt.Sprintf("created=%s slot=%s", m.Created.UTC().Format(time.RFC3339), m.Slot)
	if m.InstalledFrom != "" {
		s += " installed-from=" + m.InstalledFrom
	}
	return s
}

// maxSmallFile bounds the marker and the reset request read back.
const maxSmallFile = 4 << 10

// CreateMarker writes the marker of a STATE just made.
func (s Files) CreateMarker(m Marker) error {
	if err := s.write(MarkerFile, []byte(m.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("mark TERRA-STATE as created: %w", err)
	}
	return nil
}

// ReadMarker returns the marker's line, as written.
func (s Files) ReadMarker() (string, error) {
	b, err := s.read(MarkerFile, maxSmallFile)
	if err != nil {
		return "", fmt.Errorf("read TERRA-STATE's marker: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ProbeWritable checks that TERRA-STATE takes a write (the health
// check's): it writes content to a probe file, synced, and removes it.
func (s Files) ProbeWritable(content []byte) error {
	if err := s.write(healthProbe, content, 0o644); err != nil {
		return fmt.Errorf("write a probe: %w", err)
	}
	if err := s.remove(healthProbe); err != nil {
		return fmt.Errorf("remove the probe: %w", err)
	}
	return nil
}
