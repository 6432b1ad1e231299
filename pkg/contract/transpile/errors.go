package transpile

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

var (
	// ErrUnknownFormat means a file is neither an Ignition config, a
	// Butane config nor a Container Linux Config (or is empty, or is a
	// machine config).
	ErrUnknownFormat = errors.New("not an Ignition, Butane or Container Linux Config")
	// ErrInvalid means the translator's own report found the source
	// wrong: a YAML error, an unknown key, a value of the wrong type, an
	// error or warning of Butane or ct, or an Ignition 2 config that
	// ign-converter cannot convert.
	ErrInvalid = errors.New("invalid")
)

// Problem is one thing wrong with a config, where the source file shows
// it.
type Problem struct {
	// File is the source file's name.
	File string
	// Line and Column are 1-based, 0 when unknown.
	Line, Column int
	// Path is where in the config: the source's path for a translator's
	// report ("$.storage.files[0].mode"), the Ignition config's for
	// Terrarium's check ("$.storage.disks"); "$" is the whole config.
	Path string
	// Message says what is wrong and what to do.
	Message string
	// Err is the kind: ErrUnknownFormat, ErrInvalid, or one of package
	// ignitionspec's (ErrUnsupported, ErrVersion, ErrMalformed; ErrConflict
	// from a later check given to Result.Place).
	Err error
}

// String is "FILE:LINE:COL: PATH: MESSAGE", the place left out where it is
// not known.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, ":%d", p.Column)
		}
	}
	b.WriteString(": ")
	if p.Path != "" && p.Path != "$" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every problem found, in order. As an error it lists them,
// one a line, and matches (errors.Is) the kind of each.
type Problems []Problem

// Error lists the problems, one a line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the kinds of the problems, each once.
func (ps Problems) Unwrap() []error {
	var kinds []error
	for _, p := range ps {
		if p.Err != nil && !slices.Contains(kinds, p.Err) {
			kinds = append(kinds, p.Err)
		}
	}
	return kinds
}
