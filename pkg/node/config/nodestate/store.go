package nodestate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
)

// Schema is the journal's format this build reads and writes.
const Schema = 2

// Store is the journal's one writer: every change goes through Update,
// which saves the whole journal atomically before it returns. Safe for
// concurrent use (long steps report progress from several goroutines),
// and across processes: an Update holds the lock on firstboot's directory
// and starts from the journal as saved, when another process saved it
// since (the node's service and `firstboot run --phase` beside it lose
// none of each other's records).
type Store struct {
	mu    sync.Mutex
	files Files
	j     *Journal
	// seen is the version of the saved journal that j is: the one
	// loaded, or the last saved here.
	seen version
}

// OpenJournal loads the journal to write it (a missing file is an empty
// journal), migrated to Schema. A journal of a newer schema is refused
// (ErrNewerSchema) and left as it is.
func (s Files) OpenJournal() (*Store, error) {
	seen, err := s.savedVersion()
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	j, err := s.loadWritable()
	if err != nil {
		return nil, err
	}
	return &Store{files: s, j: j, seen: seen}, nil
}

// loadWritable loads the journal to write it: a newer schema's is refused.
func (s Files) loadWritable() (*Journal, error) {
	j, err := s.loadJournal()
	if err != nil {
		return nil, err
	}
	if j.Schema > Schema {
		return nil, fmt.Errorf("%w: %s has schema %d and this build knows schema %d at most, so this node runs an older slot than the one that wrote it; "+
			"it leaves the journal as it is. Boot the slot that wrote it (or upgrade this one to its version), "+
			"or run `firstboot reset` to erase TERRA-STATE and enroll the node again",
			ErrNewerSchema, s.path(JournalFile), j.Schema, Schema)
	}
	return j, nil
}

// ReadJournal reads the journal without writing it (a missing file is an
// empty journal). A newer build's journal is read forward-compatibly: the
// fields this build knows, its Schema left as written.
func (s Files) ReadJournal() (*Journal, error) { return s.loadJournal() }

// JournalBytes is the journal as stored, its first limit bytes: the
// support bundle's copy.
func (s Files) JournalBytes(limit int64) ([]byte, error) { return s.readUpTo(JournalFile, limit) }

// loadJournal reads and migrates the journal.
func (s Files) loadJournal() (*Journal, error) {
	p := s.path(JournalFile)
	data, err := s.readUpTo(JournalFile, maxJournalSize+1)
	if errors.Is(err, fs.ErrNotExist) {
		return &Journal{Schema: Schema}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	if len(data) > maxJournalSize {
		return nil, fmt.Errorf("read journal %s: %w: more than %d bytes", p, ErrTooLarge, maxJournalSize)
	}
	var j Journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("parse journal %s: %w: %w", p, errUnparsable, err)
	}
	if err := migrate(&j); err != nil {
		return nil, fmt.Errorf("journal %s: %w", p, err)
	}
	return &j, nil
}

// maxJournalSize bounds the journal read: far above what maxBoots boots
// of steps take.
const maxJournalSize = 64 << 20

// migrate brings a journal to Schema, in memory: the one place a change of
// the journal's format is handled (the package doc says how a change is
// made). A journal of a newer schema is left as it is.
func migrate(j *Journal) error {
	switch {
	case j.Schema < 0:
		return fmt.Errorf("schema %d is not a schema", j.Schema)
	case j.Schema == 0:
		j.Schema = 1 // written before the journal named its schema
	}
	for j.Schema < Schema {
		switch j.Schema {
		case 1:
			// 1 → 2: the journal names its schema; nothing else changed.
		}
		j.Schema++
	}
	return nil
}

// encode is the journal as saved, its oldest boots dropped past maxBoots.
func (j *Journal) encode() ([]byte, error) {
	if len(j.Boots) > maxBoots {
		j.Boots = j.Boots[len(j.Boots)-maxBoots:]
	}
	j.Schema = Schema
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode journal: %w", err)
	}
	return append(data, '\n'), nil
}

// Path is where the journal is.
func (s *Store) Path() string { return s.files.path(JournalFile) }

// Update changes the journal with fn and saves it, holding the lock on
// firstboot's directory: fn sees the journal as last saved by any process.
func (s *Store) Update(fn func(j *Journal)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.files.lock()
	if err != nil {
		return fmt.Errorf("save journal: %w", err)
	}
	defer unlock()
	// A saved journal that does not parse (another process's write is
	// atomic: only a hand could do it) is replaced by what this Store
	// holds, as before processes took turns; one that cannot be read, or
	// of a newer schema, is left alone.
	if err := s.refresh(); err != nil && !errors.Is(err, errUnparsable) {
		return err
	}
	fn(s.j)
	data, err := s.j.encode()
	if err != nil {
		return err
	}
	if err := s.files.write(JournalFile, data, 0o644); err != nil {
		return fmt.Errorf("save journal: %w", err)
	}
	if s.seen, err = s.files.savedVersion(); err != nil {
		// Saved; what it is is not known, so the next look loads it.
		s.seen = version{}
	}
	return nil
}

// refresh loads the journal again when another process saved it since
// this Store last loaded or saved it: a stat when none did.
func (s *Store) refresh() error {
	v, err := s.files.savedVersion()
	if err != nil {
		return fmt.Errorf("read journal: %w", err)
	}
	if v == s.seen || v == (version{}) {
		return nil
	}
	j, err := s.files.loadWritable()
	if err != nil {
		return err
	}
	s.j, s.seen = j, v
	return nil
}

// errUnparsable marks a saved journal that is not a journal's JSON.
var errUnparsable = errors.New("the journal does not parse")

// Read lets fn look at the journal; fn must not keep what it sees. It
// sees what another process saved since, when that can be read; else what
// this Store holds.
func (s *Store) Read(fn func(j *Journal)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.refresh() // what cannot be read now is what this Store holds
	fn(s.j)
}

// LastUpgrade is a copy of the node's last upgrade record, nil when there
// is none.
func (s *Store) LastUpgrade() *Upgrade {
	var u *Upgrade
	s.Read(func(j *Journal) {
		if j.Upgrade != nil {
			c := *j.Upgrade
			u = &c
		}
	})
	return u
}
