package strictyaml

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// describeType says in words what YAML a value of type t takes.
func describeType(t reflect.Type) string {
	if t == reflect.TypeFor[time.Duration]() {
		return "a duration (like 30s)"
	}
	if isTextType(t) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a list"
	case reflect.Array:
		return fmt.Sprintf("a list of %d items", t.Len())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Int8, reflect.Int16, reflect.Int32:
		bits := t.Bits()
		return fmt.Sprintf("an integer from %d to %d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "a value of Go type " + t.String()
	}
}

// describeNode says in words what a node holds, quoting short scalars.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		if n.Alias != nil {
			return describeNode(n.Alias)
		}
		return "an alias"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:37] + "..."
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string (" + strconv.Quote(v) + ")"
	case "!!int", "!!float":
		return "a number (" + v + ")"
	case "!!bool":
		return "a boolean (" + v + ")"
	case "!!null":
		return "null"
	default:
		return "a value tagged " + n.ShortTag() + " (" + strconv.Quote(v) + ")"
	}
}

// errorMessage extracts the text of a yaml.v3 decoding error without its
// "yaml: " and "line N: " decorations.
func errorMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			_, msgs[i] = splitLine(e)
		}
		return strings.Join(msgs, "; ")
	}
	_, msg := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
	return msg
}

// quotedList formats names as `"a", "b", "c"`.
func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
