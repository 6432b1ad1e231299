package transpile

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	cutil "github.com/coreos/butane/config/util"
	"gopkg.in/yaml.v3"
)

// position is a place in a file, 1-based; zero when unknown.
type position struct{ line, col int }

func (p position) before(q position) bool {
	return p.line < q.line || p.line == q.line && p.col < q.col
}

// locator finds where the source file says what is at a path of the
// Ignition config made of it (its keys and indexes).
type locator func(elems []any) position

// source is a source file parsed as YAML (JSON is YAML too), to find
// paths in; its root is nil when the file does not parse.
type source struct{ root *yaml.Node }

func parseSource(data []byte) source {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return source{}
	}
	return source{root: doc.Content[0]}
}

// find returns where the deepest node of the source along elems is,
// zero when not even the first element is there.
func (s source) find(elems []any) position {
	p, n := s.walk(elems)
	if n == 0 {
		return position{}
	}
	return p
}

// walk follows elems from the root as far as the source goes, and returns
// the position of the last node reached (a mapping key's own, a list
// item's) and how many elements it followed. A key matches as written or
// in snake_case, as Butane and Container Linux Configs write Ignition's
// keys (sshAuthorizedKeys is ssh_authorized_keys).
func (s source) walk(elems []any) (position, int) {
	n := s.root
	if n == nil {
		return position{}, 0
	}
	at := position{n.Line, n.Column}
	for i, e := range elems {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch e := e.(type) {
		case int:
			if n.Kind != yaml.SequenceNode || e < 0 || e >= len(n.Content) {
				return at, i
			}
			n = n.Content[e]
			at = position{n.Line, n.Column}
		case string:
			k, v := lookup(n, e)
			if k == nil {
				return at, i
			}
			at = position{k.Line, k.Column}
			n = v
		default:
			return at, i
		}
	}
	return at, len(elems)
}

// lookup finds key in a mapping node, as written or in snake_case.
func lookup(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for _, want := range []string{key, cutil.Snake(key)} {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == want {
				return n.Content[i], n.Content[i+1]
			}
		}
	}
	return nil, nil
}

// pathElem is one element of a path as package ignitionspec writes them:
// ".key" or "[index]".
var pathElem = regexp.MustCompile(`\.([^.\[]+)|\[(\d+)\]`)

// parsePath splits "$.storage.files[0].path" into its keys and indexes.
func parsePath(p string) []any {
	var elems []any
	for _, m := range pathElem.FindAllStringSubmatch(strings.TrimPrefix(p, "$"), -1) {
		if m[2] != "" {
			i, err := strconv.Atoi(m[2])
			if err != nil {
				return elems
			}
			elems = append(elems, i)
			continue
		}
		elems = append(elems, m[1])
	}
	return elems
}

// formatPath writes keys and indexes as "$.storage.files[0].path".
func formatPath(elems []any) string {
	var b strings.Builder
	b.WriteString("$")
	for _, e := range elems {
		switch e := e.(type) {
		case int:
			b.WriteString("[" + strconv.Itoa(e) + "]")
		default:
			b.WriteString("." + fmt.Sprint(e))
		}
	}
	return b.String()
}
