package strictyaml

import (
	"encoding"
	"reflect"

	"gopkg.in/yaml.v3"
)

// obsoleteUnmarshaler is the yaml.v2-style interface yaml.v3 still honours.
type obsoleteUnmarshaler interface {
	UnmarshalYAML(unmarshal func(any) error) error
}

// walker checks a node tree against a Go type, collecting problems.
type walker struct {
	problems Problems
	structs  map[reflect.Type]*structInfo
	// visited records anchored nodes already checked against a type, so
	// that aliases are checked once and alias cycles terminate.
	visited map[visitKey]bool
}

type visitKey struct {
	node *yaml.Node
	typ  reflect.Type
}

func newWalker() *walker {
	return &walker{structs: map[reflect.Type]*structInfo{}, visited: map[visitKey]bool{}}
}

// walk checks that n can be decoded into a value of type t at path p.
func (w *walker) walk(n *yaml.Node, t reflect.Type, p Path) {
	if n.Kind == yaml.AliasNode {
		if n.Alias != nil {
			w.walk(n.Alias, t, p)
		}
		return
	}
	if n.Anchor != "" {
		key := visitKey{node: n, typ: t}
		if w.visited[key] {
			return
		}
		w.visited[key] = true
	}
	if isNull(n) {
		return // decodes to the zero value of any type
	}
	if hasCustomDecoding(t, n) {
		w.tryDecode(n, t, p)
		return
	}
	if isTextType(t) {
		w.mismatch(n, t, p) // a non-scalar where a text value belongs
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		w.walk(n, t.Elem(), p)
	case reflect.Interface:
		w.walkAny(n, t, p)
	case reflect.Struct:
		w.walkStruct(n, t, p)
	case reflect.Map:
		w.walkMap(n, t, p)
	case reflect.Slice, reflect.Array:
		w.walkSequence(n, t, p)
	default:
		w.walkScalar(n, t, p)
	}
}

// hasCustomDecoding reports whether yaml.v3 decodes n into t by some means
// other than its structure: an Unmarshaler, a TextUnmarshaler for scalars,
// or its own special cases. Such values are checked by decoding them.
func hasCustomDecoding(t reflect.Type, n *yaml.Node) bool {
	pt := reflect.PointerTo(t)
	if pt.Implements(reflect.TypeFor[yaml.Unmarshaler]()) || pt.Implements(reflect.TypeFor[obsoleteUnmarshaler]()) {
		return true
	}
	if n.Kind == yaml.ScalarNode && pt.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return true
	}
	// []byte takes !!binary (and plain string) scalars.
	return n.Kind == yaml.ScalarNode && t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8
}

// isTextType reports whether t decodes from a string via
// encoding.TextUnmarshaler (and not via its own UnmarshalYAML).
func isTextType(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) &&
		!pt.Implements(reflect.TypeFor[yaml.Unmarshaler]()) && !pt.Implements(reflect.TypeFor[obsoleteUnmarshaler]())
}

// tryDecode checks n by decoding it into a throwaway value of type t.
func (w *walker) tryDecode(n *yaml.Node, t reflect.Type, p Path) {
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && !hasCustomDecoding(t, n) {
		w.mismatch(n, t, p)
		return
	}
	w.problems.addAt(p, n.Line, "%s", errorMessage(err))
}

// walkAny checks n for an interface of type t. Any scalar decodes into
// one, but yaml.v3 fails, without a line, on a mapping key that is a list
// or a mapping (it cannot be a Go map key) at any depth, so collections
// are walked as map[t]t and []t.
func (w *walker) walkAny(n *yaml.Node, t reflect.Type, p Path) {
	switch n.Kind {
	case yaml.MappingNode:
		w.walkMap(n, reflect.MapOf(t, t), p)
	case yaml.SequenceNode:
		w.walkSequence(n, reflect.SliceOf(t), p)
	}
}

func (w *walker) walkScalar(n *yaml.Node, t reflect.Type, p Path) {
	if n.Kind != yaml.ScalarNode {
		w.mismatch(n, t, p)
		return
	}
	w.tryDecode(n, t, p)
}

func (w *walker) walkSequence(n *yaml.Node, t reflect.Type, p Path) {
	if n.Kind != yaml.SequenceNode {
		w.mismatch(n, t, p)
		return
	}
	if t.Kind() == reflect.Array && len(n.Content) != t.Len() {
		w.problems.addAt(p, n.Line, "expected a list of exactly %d items, got %d", t.Len(), len(n.Content))
		return
	}
	for i, item := range n.Content {
		if isNull(resolveAlias(item)) && droppedWhenNull(t.Elem()) {
			w.problems.addAt(p.Index(i), item.Line, "is an empty list item; remove it or give it a value")
			continue
		}
		w.walk(item, t.Elem(), p.Index(i))
	}
}

// droppedWhenNull reports whether yaml.v3 drops a null list item bound for
// type t (it keeps nil only for interfaces, pointers, maps and slices): a
// list would silently lose the item, and an array shift the items after it.
func droppedWhenNull(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice:
		return false
	}
	return true
}

// resolveAlias returns the node an alias stands for, or n itself.
func resolveAlias(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func (w *walker) walkMap(n *yaml.Node, t reflect.Type, p Path) {
	if n.Kind != yaml.MappingNode {
		w.mismatch(n, t, p)
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			w.walkMerge(v, t, p)
			continue
		}
		if !w.checkKey(k, seen, p) {
			continue
		}
		w.walk(k, t.Key(), p.Field(k.Value))
		w.walk(v, t.Elem(), p.Field(k.Value))
	}
}

func (w *walker) walkStruct(n *yaml.Node, t reflect.Type, p Path) {
	if n.Kind != yaml.MappingNode {
		w.mismatch(n, t, p)
		return
	}
	info := w.structInfo(t)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			w.walkMerge(v, t, p)
			continue
		}
		if !w.checkKey(k, seen, p) {
			continue
		}
		fp := p.Field(k.Value)
		if ft, ok := info.fields[k.Value]; ok {
			w.walk(v, ft, fp)
			continue
		}
		if info.inlineMap != nil {
			w.walk(v, info.inlineMap.Elem(), fp)
			continue
		}
		w.unknownField(k, info, fp)
	}
}

// checkKey reports whether k is a usable, first-seen scalar key, recording a
// problem otherwise.
func (w *walker) checkKey(k *yaml.Node, seen map[string]int, p Path) bool {
	k = resolveAlias(k)
	if k.Kind != yaml.ScalarNode {
		w.problems.addAt(p, k.Line, "mapping keys must be plain values, got %s", describeNode(k))
		return false
	}
	if first, dup := seen[k.Value]; dup {
		w.problems.addAt(p.Field(k.Value), k.Line, "duplicate key; first defined at line %d", first)
		return false
	}
	seen[k.Value] = k.Line
	return true
}

// walkMerge checks the value of a "<<" merge key: a mapping, or a list of
// mappings, whose keys are merged into the enclosing mapping of type t.
func (w *walker) walkMerge(v *yaml.Node, t reflect.Type, p Path) {
	target := resolveAlias(v)
	switch target.Kind {
	case yaml.MappingNode:
		w.walk(v, t, p)
	case yaml.SequenceNode:
		for _, item := range target.Content {
			w.walkMerge(item, t, p)
		}
	default:
		w.problems.addAt(p, v.Line, "a merge key (<<) needs a mapping or a list of mappings, got %s", describeNode(target))
	}
}

func (w *walker) unknownField(k *yaml.Node, info *structInfo, p Path) {
	if s := suggest(k.Value, info.names); s != "" {
		w.problems.addAt(p, k.Line, "unknown field; did you mean %q?", s)
		return
	}
	if len(info.names) == 0 {
		w.problems.addAt(p, k.Line, "unknown field; no fields are allowed here")
		return
	}
	w.problems.addAt(p, k.Line, "unknown field; valid fields: %s", quotedList(info.names))
}

func (w *walker) mismatch(n *yaml.Node, t reflect.Type, p Path) {
	w.problems.addAt(p, n.Line, "expected %s, got %s", describeType(t), describeNode(n))
}
