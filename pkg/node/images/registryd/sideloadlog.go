package registryd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// SideloadRecord is one line of the side-load log
// (layout.RegistrySideloadLog): a disk the registry met, and what came of
// it.
type SideloadRecord struct {
	At   time.Time `json:"at"`
	Disk string    `json:"disk"`
	// Outcome is "added" or "refused".
	Outcome string `json:"outcome"`
	// Added are the references the disk added; Replaced the tags it moved,
	// with the digests they had before.
	Added    []string               `json:"added,omitempty"`
	Replaced []registry.ReplacedTag `json:"replaced,omitempty"`
	// Signer is the ID of the key that signed the bundle; "" for an
	// unsigned one (a node that trusts no key).
	Signer string `json:"signer,omitempty"`
	// Bytes is what the disk wrote into the cache.
	Bytes uint64 `json:"bytes,omitempty"`
	// Error is why the disk was refused.
	Error string `json:"error,omitempty"`
}

// Outcomes of a SideloadRecord.
const (
	SideloadAdded   = "added"
	SideloadRefused = "refused"
)

// sideloadLogKeep is how many records the log keeps: the newest.
const sideloadLogKeep = 200

// sideloadLogMax bounds the log read back (each record is well under
// 4 KiB with a few dozen images).
const sideloadLogMax = 4 << 20

// record appends the outcome of a disk to the side-load log. The log is
// rewritten whole (atomically, synced): a power cut leaves the old log or
// the new one, never half a line.
func (s *SideLoader) record(dev string, res registry.Sideloaded, err error) {
	if s.Record == "" {
		return
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	rec := SideloadRecord{At: now().UTC(), Disk: dev, Outcome: SideloadAdded, Added: res.Added, Replaced: res.Replaced, Bytes: res.Bytes}
	if res.Signed {
		rec.Signer = res.Signer.ID()
	}
	if err != nil {
		rec = SideloadRecord{At: rec.At, Disk: dev, Outcome: SideloadRefused, Error: err.Error()}
	}
	if err := appendSideloadLog(s.Record, rec); err != nil {
		s.Log.Warn("registry: the side-load log", "path", s.Record, "err", err)
	}
}

// appendSideloadLog adds rec to the log at path. A log that does not
// read back whole keeps what did (and the error is returned, once the
// new record is written).
func appendSideloadLog(path string, rec SideloadRecord) error {
	recs, rerr := ReadSideloadLog(path)
	if errors.Is(rerr, os.ErrNotExist) {
		rerr = nil
	}
	recs = append(recs, rec)
	if len(recs) > sideloadLogKeep {
		recs = recs[len(recs)-sideloadLogKeep:]
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("encode a side-load record: %w", err)
		}
	}
	if err := atomicfile.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the side-load log: %w", err)
	}
	return rerr
}

// ReadSideloadLog reads the side-load log at path, oldest record first.
func ReadSideloadLog(path string) ([]SideloadRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the side-load log: %w", err)
	}
	defer f.Close()
	var recs []SideloadRecord
	sc := bufio.NewScanner(io.LimitReader(f, sideloadLogMax))
	sc.Buffer(make([]byte, 64<<10), sideloadLogMax)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var r SideloadRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return recs, fmt.Errorf("read the side-load log %s: line %d: %w", path, len(recs)+1, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return recs, fmt.Errorf("read the side-load log %s: %w", path, err)
	}
	return recs, nil
}
