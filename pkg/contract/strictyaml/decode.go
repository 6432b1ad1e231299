package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Unmarshal decodes the single YAML document in data into out, which must be
// a non-nil pointer (normally to a struct).
//
// Unlike yaml.Unmarshal it rejects unknown fields at any depth, values of the
// wrong type, duplicate keys, empty list items that yaml.v3 would silently
// drop, empty input and more than one document. The
// returned error is a Problems listing every such problem found, each with
// its path and line; out is left untouched unless there are none.
// ErrInvalidTarget is returned when out is not a non-nil pointer.
func Unmarshal(data []byte, out any) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("%w, got %T", ErrInvalidTarget, out)
	}
	root, problems := parseDocument(data)
	if problems != nil {
		return problems
	}
	w := newWalker()
	w.walk(root, rv.Type().Elem(), Root())
	if err := w.problems.Err(); err != nil {
		return err
	}
	if err := root.Decode(out); err != nil {
		return decodeError(err, root)
	}
	return nil
}

// parseDocument parses data, which must hold exactly one non-empty document,
// and returns the document's root node.
func parseDocument(data []byte) (*yaml.Node, Problems) {
	var problems Problems
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	switch {
	case errors.Is(err, io.EOF):
		problems.Addf(Root(), "document is empty")
		return nil, problems
	case err != nil:
		return nil, syntaxProblems(err)
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	if isNull(root) {
		problems.Addf(Root(), "document is empty")
		return nil, problems
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
		return root, nil
	case err != nil:
		return nil, syntaxProblems(err)
	default:
		problems.addAt(Root(), next.Line,
			"found a second YAML document; only one is allowed (remove the '---' separator and what follows)")
		return nil, problems
	}
}

// syntaxProblems turns a yaml.v3 parse error ("yaml: line 3: ...") into a
// Problem at the root carrying the line.
func syntaxProblems(err error) Problems {
	line, msg := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
	return Problems{{Path: Root().String(), Line: line, Message: "invalid YAML: " + msg}}
}

// splitLine splits "line N: message" into N and message; it returns 0 and
// the input when there is no such prefix.
func splitLine(s string) (int, string) {
	rest, ok := strings.CutPrefix(s, "line ")
	if !ok {
		return 0, s
	}
	num, msg, ok := strings.Cut(rest, ": ")
	if !ok {
		return 0, s
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, s
	}
	return n, msg
}

// decodeError converts an error from the final yaml.v3 decode. The walk
// catches what it can beforehand, so this is a fallback for what only
// yaml.v3 sees: its TypeError lines are mapped back to document paths.
func decodeError(err error, root *yaml.Node) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("strictyaml: decoding: %w", err)
	}
	idx := indexLines(root)
	problems := make(Problems, 0, len(te.Errors))
	for _, e := range te.Errors {
		line, msg := splitLine(e)
		path, ok := idx.byLine[line]
		if !ok {
			path = Root().String()
		}
		problems = append(problems, Problem{Path: path, Line: line, Message: msg})
	}
	return problems
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func isMergeKey(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && n.ShortTag() == "!!merge"
}
