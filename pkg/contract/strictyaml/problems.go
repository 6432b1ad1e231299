package strictyaml

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong with a document.
type Problem struct {
	// Path is where in the document the problem is, e.g. "$.hostname".
	Path string
	// Line is the 1-based line in the input, or 0 when unknown.
	Line int
	// Message says what is wrong and, where possible, how to fix it.
	Message string
}

// String formats the problem as "<path>: <message>", followed by
// " (line N)" when the line is known.
func (p Problem) String() string {
	s := p.Path + ": " + p.Message
	if p.Line > 0 {
		s += " (line " + strconv.Itoa(p.Line) + ")"
	}
	return s
}

// Problems collects every problem found in a document. A non-empty Problems
// is an error whose text has one problem per line. Retrieve it from a wrapped
// error with errors.As(err, &problems).
type Problems []Problem

// Error returns one line per problem, see Problem.String.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Addf records a problem at path with a message formatted by fmt.Sprintf.
func (ps *Problems) Addf(path Path, format string, args ...any) {
	ps.addAt(path, 0, format, args...)
}

func (ps *Problems) addAt(path Path, line int, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path.String(), Line: line, Message: fmt.Sprintf(format, args...)})
}

// Err returns ps as an error, or nil when there are no problems.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// WithFile returns the problems as an error whose lines are prefixed with the
// file name, e.g. "machine.yaml: $.hostname: required", or nil when there are
// no problems.
func (ps Problems) WithFile(name string) error {
	if len(ps) == 0 {
		return nil
	}
	return &FileError{File: name, Problems: ps}
}

// WithLines returns a copy of ps in which problems without a line number get
// the line of their path in data, the YAML the problems were found in. It is
// meant for problems found after decoding (validation), which know the path
// but not the line. Paths that are not in data (such as missing fields) keep
// line 0, and so does everything when data does not parse.
func (ps Problems) WithLines(data []byte) Problems {
	out := make(Problems, len(ps))
	copy(out, ps)
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return out
	}
	idx := indexLines(doc.Content[0])
	for i := range out {
		if out[i].Line == 0 {
			out[i].Line = idx.byPath[out[i].Path]
		}
	}
	return out
}

// FileError is a set of problems found in one named file.
type FileError struct {
	File     string
	Problems Problems
}

// Error returns one line per problem, each prefixed with "<file>: ".
func (e *FileError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = e.File + ": " + p.String()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so that errors.As(err, &problems) works.
func (e *FileError) Unwrap() error { return e.Problems }
