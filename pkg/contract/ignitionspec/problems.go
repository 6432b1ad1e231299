package ignitionspec

import (
	"fmt"
	"slices"
	"strings"
)

// Problem is one thing wrong with a config (or with a host for it), at its
// JSON path in the config ("$.storage.files[0].contents.source").
type Problem struct {
	// Path is where in the config; "$" is the whole document.
	Path string
	// Message says what is wrong and what to do instead.
	Message string
	// Err is the kind: ErrMalformed, ErrUnsupported or ErrConflict (or
	// the kind of a host's check, such as the node's drift).
	Err error
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// Problems is every problem found, in the order found. As an error it
// lists them all, one a line, and matches (errors.Is) the kind of each.
type Problems []Problem

// Error lists the problems.
func (ps Problems) Error() string {
	var b strings.Builder
	what := "problem"
	if len(ps) != 1 {
		what = "problems"
	}
	fmt.Fprintf(&b, "ignition config: %d %s:", len(ps), what)
	for _, p := range ps {
		b.WriteString("\n\t")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap returns the kinds of the problems, each once.
func (ps Problems) Unwrap() []error {
	var kinds []error
	for _, p := range ps {
		if !slices.Contains(kinds, p.Err) {
			kinds = append(kinds, p.Err)
		}
	}
	return kinds
}

// problems collects problems of one kind of check.
type problems struct {
	list Problems
}

func (ps *problems) add(kind error, at, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: at, Message: fmt.Sprintf(format, args...), Err: kind})
}

func (ps *problems) unsupported(at, format string, args ...any) {
	ps.add(ErrUnsupported, at, format, args...)
}

func (ps *problems) malformed(at, format string, args ...any) {
	ps.add(ErrMalformed, at, format, args...)
}

// err is the problems as an error, nil when there are none.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return ps.list
}

// field appends a key to a JSON path.
func field(at, key string) string { return at + "." + key }

// index appends an index to a JSON path.
func index(at string, i int) string { return fmt.Sprintf("%s[%d]", at, i) }

// jsonPath renders the elements of a validation report's context (keys
// and indexes) the way this package names paths: keys after dots, indexes
// in brackets ("$.storage.files[0].path").
func jsonPath(elems []any) string {
	var b strings.Builder
	b.WriteString("$")
	for _, e := range elems {
		if i, ok := e.(int); ok {
			fmt.Fprintf(&b, "[%d]", i)
		} else {
			fmt.Fprintf(&b, ".%v", e)
		}
	}
	return b.String()
}
