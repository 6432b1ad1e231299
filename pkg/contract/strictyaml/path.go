package strictyaml

import "strconv"

// Path is a location in a YAML document in a JSONPath-like notation: the
// document root is "$", mapping keys are appended as ".key" (or as ["key"]
// when the key is not a plain identifier) and list items as "[i]", e.g.
// $.network.interfaces[0].addresses[1].
//
// Path is an immutable value; Field and Index return new paths. The zero
// Path is the root.
type Path struct {
	s string
}

// Root returns the path of the document root, "$".
func Root() Path { return Path{s: "$"} }

// String returns the path in its textual form, e.g. "$.admin.name".
func (p Path) String() string {
	if p.s == "" {
		return "$"
	}
	return p.s
}

// Field returns the path of the mapping key name below p.
func (p Path) Field(name string) Path {
	if isPlainKey(name) {
		return Path{s: p.String() + "." + name}
	}
	return Path{s: p.String() + "[" + strconv.Quote(name) + "]"}
}

// Index returns the path of the i-th (zero-based) list item below p.
func (p Path) Index(i int) Path {
	return Path{s: p.String() + "[" + strconv.Itoa(i) + "]"}
}

// isPlainKey reports whether name can be written after a dot without quoting.
func isPlainKey(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}
