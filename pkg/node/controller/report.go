package controller

import "github.com/terrarium-os/terrarium/pkg/node/step"

// Reporter is how a controller tells what it did: the node's console and
// log, and this boot's record in the node's journal.
type Reporter interface {
	// Say writes a line to the console and the log.
	Say(format string, args ...any)
	// Note records a step in this boot's journal record. A journal that
	// cannot be written is logged, not returned: what a controller does
	// next never depends on it.
	Note(name string, result step.Result, detail string)
}
