package media

// Insertions tells each insertion of a stick once: a stick left in is not
// found again at the next look; the same stick pulled and put back, or
// another put in under the same device name, is (Medium.Insertion). The
// zero value has seen none.
type Insertions struct {
	// served is the insertion last found, while it stays inserted.
	served string
}

// Next returns a medium carrying one of the labels that was not there at
// the last look; false when none is inserted or the one inserted was
// found before.
func (w *Insertions) Next(m Media, labels ...string) (Medium, bool) {
	found, ok := m.Find(labels...)
	if !ok {
		w.served = ""
		return Medium{}, false
	}
	if found.Insertion == w.served {
		return Medium{}, false // the same stick, still inserted
	}
	w.served = found.Insertion
	return found, true
}
