package cloudinit

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// doc walks one YAML document of cloud-init input, collecting what
// Terrarium cannot map (by name) and what is malformed (with its line), so
// that one error lists them all.
type doc struct {
	// what names the document in errors: "cloud-config", "network-config".
	what        string
	unsupported []string
	malformed   []string
}

// entry is one key and value of a mapping.
type entry struct {
	key  string
	path string
	val  *yaml.Node
}

// parseYAML parses data into its root node, nil for an empty document.
func parseYAML(what string, data []byte) (*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s is %w: %w", what, ErrMalformed, err)
	}
	if len(root.Content) == 0 || isNull(root.Content[0]) {
		return nil, nil
	}
	return root.Content[0], nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// join appends key to path ("" is the document's top level).
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func (d *doc) badf(n *yaml.Node, path, format string, args ...any) {
	if path == "" {
		path = "the document"
	}
	d.malformed = append(d.malformed, fmt.Sprintf("%s: %s (line %d)", path, fmt.Sprintf(format, args...), n.Line))
}

func (d *doc) unsupportedf(format string, args ...any) {
	d.unsupported = append(d.unsupported, fmt.Sprintf(format, args...))
}

// plain refuses YAML aliases: walking them could cost as much as the
// expanded document, which a small file can make enormous.
func (d *doc) plain(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		d.badf(n, path, "YAML aliases (*%s) are not supported; write the value out", n.Value)
		return false
	}
	return true
}

// mapping returns n's entries in document order, or records that n is not
// a mapping (a null value is an empty mapping).
func (d *doc) mapping(n *yaml.Node, path string) []entry {
	if !d.plain(n, path) || isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.badf(n, path, "must be a mapping")
		return nil
	}
	seen := map[string]bool{}
	entries := make([]entry, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.badf(k, path, "keys must be plain strings")
			continue
		}
		if seen[k.Value] {
			d.badf(k, join(path, k.Value), "repeated; each key may appear once")
			continue
		}
		seen[k.Value] = true
		entries = append(entries, entry{key: k.Value, path: join(path, k.Value), val: v})
	}
	return entries
}

// list returns n's items, or records that n is not a list (a null value
// is an empty list).
func (d *doc) list(n *yaml.Node, path string) []*yaml.Node {
	if !d.plain(n, path) || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.badf(n, path, "must be a list")
		return nil
	}
	return n.Content
}

// str returns n's value, "" for null, or records that n is not a scalar.
func (d *doc) str(n *yaml.Node, path string) string {
	if !d.plain(n, path) || isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		d.badf(n, path, "must be a single value")
		return ""
	}
	return strings.TrimSpace(n.Value)
}

// strs returns the scalars of a list, or records what is wrong.
func (d *doc) strs(n *yaml.Node, path string) []string {
	var out []string
	for i, item := range d.list(n, path) {
		if s := d.str(item, index(path, i)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// boolean returns n as a bool (true, false, and YAML 1.1's yes, no, on,
// off), false for null, or records that it is none.
func (d *doc) boolean(n *yaml.Node, path string) bool {
	if !d.plain(n, path) || isNull(n) {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		d.badf(n, path, "must be true or false")
	}
	return b
}

// get returns the value of key among entries, nil when absent.
func get(entries []entry, key string) *yaml.Node {
	for _, e := range entries {
		if e.key == key {
			return e.val
		}
	}
	return nil
}

// err returns the problems found as one error, nil when there are none.
// takes says what Terrarium does take, advice what to do about the rest.
func (d *doc) err(takes, advice string) error {
	var errs []error
	if len(d.malformed) > 0 {
		errs = append(errs, fmt.Errorf("%s is %w: %s", d.what, ErrMalformed, strings.Join(d.malformed, "; ")))
	}
	if len(d.unsupported) > 0 {
		errs = append(errs, fmt.Errorf("%s: %s: %w (it takes %s)%s",
			d.what, strings.Join(d.unsupported, ", "), ErrUnsupported, takes, advice))
	}
	return errors.Join(errs...)
}
