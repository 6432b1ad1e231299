package strictyaml

import (
	"reflect"
	"strings"
)

// structInfo is what a mapping decoded into a struct may contain.
type structInfo struct {
	// names are the accepted keys in declaration order (for messages).
	names []string
	// fields maps each accepted key to the type of its field.
	fields map[string]reflect.Type
	// inlineMap is the type of a `yaml:",inline"` map field taking all
	// other keys, or nil.
	inlineMap reflect.Type
}

// structInfo returns the keys a struct type accepts, following yaml.v3's
// rules: the key is the tag name or the lower-cased field name, `yaml:"-"`
// and unexported fields are skipped, and `yaml:",inline"` structs (or
// pointers to structs) contribute their own fields.
func (w *walker) structInfo(t reflect.Type) *structInfo {
	if info, ok := w.structs[t]; ok {
		return info
	}
	info := &structInfo{fields: map[string]reflect.Type{}}
	collectFields(t, info, map[reflect.Type]bool{})
	w.structs[t] = info
	return info
}

func collectFields(t reflect.Type, info *structInfo, inProgress map[reflect.Type]bool) {
	if inProgress[t] {
		return // an inline cycle; yaml.v3 rejects it when decoding
	}
	inProgress[t] = true
	defer delete(inProgress, t)
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if hasOption(opts, "inline") {
			collectInline(f.Type, info, inProgress)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if _, dup := info.fields[name]; !dup {
			info.names = append(info.names, name)
		}
		info.fields[name] = f.Type
	}
}

func collectInline(t reflect.Type, info *structInfo, inProgress map[reflect.Type]bool) {
	switch {
	case t.Kind() == reflect.Map:
		info.inlineMap = t
	case t.Kind() == reflect.Struct:
		collectFields(t, info, inProgress)
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		collectFields(t.Elem(), info, inProgress)
	}
}

func hasOption(opts, want string) bool {
	for opt := range strings.SplitSeq(opts, ",") {
		if opt == want {
			return true
		}
	}
	return false
}

// suggest returns the candidate closest to name when it is close enough to
// be a likely typo, or "". Case, '-' and '_' are ignored, and small edits
// (insertions, deletions, substitutions, swaps of neighbours) count as one.
func suggest(name string, candidates []string) string {
	norm := normalizeKey(name)
	limit := max(1, min(2, len([]rune(norm))/3))
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if d := editDistance(norm, normalizeKey(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

func normalizeKey(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer("-", "", "_", "").Replace(s)
}

// editDistance is the optimal string alignment distance between a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// d[i][j] is the distance between ra[:i] and rb[:j].
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
