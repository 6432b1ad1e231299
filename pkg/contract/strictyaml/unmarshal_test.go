package strictyaml

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type testAddress struct {
	Address string `yaml:"address"`
	Port    uint16 `yaml:"port,omitempty"`
}

type testInterface struct {
	Name      string        `yaml:"name"`
	Addresses []testAddress `yaml:"addresses,omitempty"`
	Up        bool          `yaml:"up"`
	Secret    string        `yaml:"-"`
}

type testNetwork struct {
	Interfaces []testInterface `yaml:"interfaces"`
}

type testAdmin struct {
	Name string   `yaml:"name"`
	Keys []string `yaml:"keys"`
}

type testMeta struct {
	ID string `yaml:"id"`
}

// upper is a custom-decoded type that accepts only upper-case strings.
type upper string

func (u *upper) UnmarshalYAML(n *yaml.Node) error {
	if n.Value != strings.ToUpper(n.Value) {
		return errors.New("must be upper case")
	}
	*u = upper(n.Value)
	return nil
}

type testDoc struct {
	testMeta `yaml:",inline"`
	Hostname string                 `yaml:"hostname,omitempty"`
	Network  testNetwork            `yaml:"network"`
	Routes   map[string]testAddress `yaml:"routes"`
	Admin    *testAdmin             `yaml:"admin"`
	Tags     []string               `yaml:"tags"`
	Timeout  time.Duration          `yaml:"timeout"`
	Count    int8                   `yaml:"count"`
	Pair     [2]int                 `yaml:"pair"`
	Code     upper                  `yaml:"code"`
	IP       netip.Addr             `yaml:"ip"`
	Extra    any                    `yaml:"extra"`
	Labels   map[string]string
}

const validDoc = `
id: m1
hostname: node-1
network:
  interfaces:
    - name: eth0
      up: true
      addresses:
        - address: 10.0.0.1
          port: 22
routes:
  default: {address: 10.0.0.254}
admin:
  name: admin
  keys: [a, b]
tags: [x]
timeout: 30s
count: -3
pair: [1, 2]
code: ABC
ip: 10.0.0.1
extra: {anything: [goes]}
labels: {a: b}
`

func TestUnmarshalValid(t *testing.T) {
	var got testDoc
	if err := Unmarshal([]byte(validDoc), &got); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	want := testDoc{
		testMeta: testMeta{ID: "m1"},
		Hostname: "node-1",
		Network: testNetwork{Interfaces: []testInterface{{
			Name: "eth0", Up: true,
			Addresses: []testAddress{{Address: "10.0.0.1", Port: 22}},
		}}},
		Routes:  map[string]testAddress{"default": {Address: "10.0.0.254"}},
		Admin:   &testAdmin{Name: "admin", Keys: []string{"a", "b"}},
		Tags:    []string{"x"},
		Timeout: 30 * time.Second,
		Count:   -3,
		Pair:    [2]int{1, 2},
		Code:    "ABC",
		IP:      netip.MustParseAddr("10.0.0.1"),
		Extra:   map[string]any{"anything": []any{"goes"}},
		Labels:  map[string]string{"a": "b"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestUnmarshalProblems(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", "$: document is empty"},
		{"only comments", "# nothing here\n", "$: document is empty"},
		{"only separator", "---\n", "$: document is empty"},
		{"null", "~\n", "$: document is empty"},
		{"syntax", "hostname: a\nnetwork: b: c\n", "$: invalid YAML: mapping values are not allowed in this context (line 2)"},
		{"two documents", "hostname: a\n---\nhostname: b\n",
			"$: found a second YAML document; only one is allowed (remove the '---' separator and what follows) (line 2)"},
		{"not a mapping", "- a\n", "$: expected a mapping, got a list (line 1)"},
		{"unknown top-level with suggestion", "hostnme: a\n", `$.hostnme: unknown field; did you mean "hostname"? (line 1)`},
		{"suggestion ignores case and separators", "Time_Out: 1s\n", `$.Time_Out: unknown field; did you mean "timeout"? (line 1)`},
		{"unknown without suggestion", "network:\n  bogus: 1\n", `$.network.bogus: unknown field; valid fields: "interfaces" (line 2)`},
		{"unknown in slice of structs", "network:\n  interfaces:\n    - name: a\n      addresses:\n        - address: x\n        - adress: y\n",
			`$.network.interfaces[0].addresses[1].adress: unknown field; did you mean "address"? (line 6)`},
		{"unknown in map of structs", "routes:\n  default:\n    adress: x\n",
			`$.routes.default.adress: unknown field; did you mean "address"? (line 3)`},
		{"unknown under quoted key", "routes:\n  \"my route\":\n    prot: 1\n",
			`$.routes["my route"].prot: unknown field; did you mean "port"? (line 3)`},
		{"unknown in pointer field", "admin:\n  nmae: a\n", `$.admin.nmae: unknown field; did you mean "name"? (line 2)`},
		{"unknown near inline field", "idd: a\n", `$.idd: unknown field; did you mean "id"? (line 1)`},
		{"dash-tagged field is unknown", "network:\n  interfaces:\n    - secret: x\n",
			`$.network.interfaces[0].secret: unknown field; valid fields: "name", "addresses", "up" (line 3)`},
		{"string where list expected", "tags: foo\n", `$.tags: expected a list, got a string ("foo") (line 1)`},
		{"mapping where string expected", "hostname: {a: 1}\n", "$.hostname: expected a string, got a mapping (line 1)"},
		{"list where struct expected", "admin: [a]\n", "$.admin: expected a mapping, got a list (line 1)"},
		{"bool", "network:\n  interfaces:\n    - up: maybe\n",
			`$.network.interfaces[0].up: expected a boolean (true or false), got a string ("maybe") (line 3)`},
		{"int overflow", "count: 300\n", "$.count: expected an integer from -128 to 127, got a number (300) (line 1)"},
		{"uint overflow", "routes: {r: {port: 70000}}\n", "$.routes.r.port: expected an integer from 0 to 65535, got a number (70000) (line 1)"},
		{"duration", "timeout: soon\n", `$.timeout: expected a duration (like 30s), got a string ("soon") (line 1)`},
		{"array length", "pair: [1]\n", "$.pair: expected a list of exactly 2 items, got 1 (line 1)"},
		{"custom unmarshaler", "code: abc\n", "$.code: must be upper case (line 1)"},
		{"text unmarshaler", "ip: 1.2.3\n", `$.ip: ParseAddr("1.2.3"): IPv4 address too short (line 1)`},
		{"text unmarshaler given a mapping", "ip: {a: 1}\n", "$.ip: expected a string, got a mapping (line 1)"},
		{"duplicate key", "hostname: a\nhostname: b\n", "$.hostname: duplicate key; first defined at line 1 (line 2)"},
		{"nested duplicate key", "admin:\n  name: a\n  keys: []\n  name: b\n", "$.admin.name: duplicate key; first defined at line 2 (line 4)"},
		{"duplicate map key", "labels: {a: b, a: c}\n", "$.labels.a: duplicate key; first defined at line 1 (line 1)"},
		{"complex key", "labels: {[a]: b}\n", "$.labels: mapping keys must be plain values, got a list (line 1)"},
		{"every problem reported", "hostnme: a\ntags: x\nnetwork:\n  interfaces:\n    - nme: a\n      up: 3\n    - name: b\n      nmae: c\n",
			strings.Join([]string{
				`$.hostnme: unknown field; did you mean "hostname"? (line 1)`,
				`$.tags: expected a list, got a string ("x") (line 2)`,
				`$.network.interfaces[0].nme: unknown field; did you mean "name"? (line 5)`,
				`$.network.interfaces[0].up: expected a boolean (true or false), got a number (3) (line 6)`,
				`$.network.interfaces[1].nmae: unknown field; did you mean "name"? (line 8)`,
			}, "\n")},
		{"alias reported once", "routes:\n  a: &r {adress: x}\n  b: *r\n",
			`$.routes.a.adress: unknown field; did you mean "address"? (line 2)`},
		{"unknown field via merge key", "routes:\n  a: &r {adress: x}\n  b:\n    <<: *r\n    port: 1\n",
			`$.routes.a.adress: unknown field; did you mean "address"? (line 2)`},
		{"bad merge value", "routes:\n  b:\n    <<: 3\n", "$.routes.b: a merge key (<<) needs a mapping or a list of mappings, got a number (3) (line 3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got testDoc
			err := Unmarshal([]byte(tt.in), &got)
			if err == nil {
				t.Fatalf("Unmarshal succeeded, want error:\n%s", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n%s\nwant:\n%s", err, tt.want)
			}
			var ps Problems
			if !errors.As(err, &ps) {
				t.Errorf("error %T is not a Problems", err)
			}
			if !reflect.DeepEqual(got, testDoc{}) {
				t.Errorf("target was modified despite errors: %+v", got)
			}
		})
	}
}

func TestUnmarshalAnchorsAndMerge(t *testing.T) {
	in := "routes:\n  a: &r {address: x, port: 1}\n  b: *r\n  c:\n    <<: *r\n    port: 2\n"
	var got testDoc
	if err := Unmarshal([]byte(in), &got); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	want := map[string]testAddress{"a": {"x", 1}, "b": {"x", 1}, "c": {"x", 2}}
	if !reflect.DeepEqual(got.Routes, want) {
		t.Errorf("routes = %+v, want %+v", got.Routes, want)
	}
}

func TestUnmarshalAliasCycle(t *testing.T) {
	var got struct {
		A any `yaml:"a"`
	}
	// The walk must terminate; yaml.v3 then rejects the cycle.
	if err := Unmarshal([]byte("a: &x [*x]\n"), &got); err == nil {
		t.Error("Unmarshal accepted a self-referencing alias")
	}
}

func TestUnmarshalInvalidTarget(t *testing.T) {
	var doc testDoc
	var nilPtr *testDoc
	for name, out := range map[string]any{"nil": nil, "non-pointer": doc, "nil pointer": nilPtr} {
		t.Run(name, func(t *testing.T) {
			err := Unmarshal([]byte("id: a\n"), out)
			if !errors.Is(err, ErrInvalidTarget) {
				t.Errorf("err = %v, want ErrInvalidTarget", err)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"name", "macAddress", "dhcp", "addresses", "gateway", "dns"}
	tests := []struct{ in, want string }{
		{"nme", "name"},
		{"mac_address", "macAddress"},
		{"MACADDRESS", "macAddress"},
		{"dhpc", "dhcp"},
		{"adresses", "addresses"},
		{"gatway", "gateway"},
		{"dn", "dns"},
		{"x", ""},
		{"hostname", ""},
		{"mac", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := suggest(tt.in, names); got != tt.want {
				t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestDecodeErrorMapsLinesToPaths(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: 1\nb:\n  - x\n  - {c: 2}\n"), &doc); err != nil {
		t.Fatal(err)
	}
	te := &yaml.TypeError{Errors: []string{
		"line 1: cannot unmarshal !!int `1` into foo",
		"line 4: cannot unmarshal !!int `2` into bar",
		"line 9: out of range",
	}}
	want := "$.a: cannot unmarshal !!int `1` into foo (line 1)\n" +
		"$.b[1].c: cannot unmarshal !!int `2` into bar (line 4)\n" +
		"$: out of range (line 9)"
	if err := decodeError(te, doc.Content[0]); err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
	other := errors.New("boom")
	if err := decodeError(other, doc.Content[0]); !errors.Is(err, other) {
		t.Errorf("non-TypeError not wrapped: %v", err)
	}
}

func TestUnmarshalAnyRejectsCollectionKeys(t *testing.T) {
	// Found by FuzzUnmarshal (testdata/fuzz/FuzzUnmarshal/508edda557f26817):
	// yaml.v3 cannot decode a list or mapping key into an interface and
	// failed without a path.
	for in, want := range map[string]string{
		"extra: {[] }\n":                "$.extra: mapping keys must be plain values, got a list (line 1)",
		"extra: [{a: {{b: 1}: 2}}]\n":   "$.extra[0].a: mapping keys must be plain values, got a mapping (line 1)",
		"extra: {<<: {[x]: 1}, y: 2}\n": "$.extra: mapping keys must be plain values, got a list (line 1)",
	} {
		var got testDoc
		err := Unmarshal([]byte(in), &got)
		var ps Problems
		if !errors.As(err, &ps) || err.Error() != want {
			t.Errorf("Unmarshal(%q) = %v (%T), want Problems %q", in, err, err, want)
		}
	}
}

func TestUnmarshalRejectsEmptyListItems(t *testing.T) {
	// Found by bundle's FuzzParse (pkg/image/bundle/testdata/fuzz/FuzzParse/
	// c15b7f82c0cf9a33): yaml.v3 drops a null item from a list of structs or
	// scalars, so a truncated "lock:\n  -" read as no lock at all, and
	// shifts the items of an array after it.
	for in, want := range map[string]string{
		"tags: [a, ~, b]\n":                "$.tags[1]: is an empty list item; remove it or give it a value (line 1)",
		"network:\n  interfaces:\n    -\n": "$.network.interfaces[0]: is an empty list item; remove it or give it a value (line 3)",
		"pair: [~, 1]\n":                   "$.pair[0]: is an empty list item; remove it or give it a value (line 1)",
		"routes: {a: &n ~}\ntags: [*n]\n":  "$.tags[0]: is an empty list item; remove it or give it a value (line 2)",
	} {
		var got testDoc
		err := Unmarshal([]byte(in), &got)
		var ps Problems
		if !errors.As(err, &ps) || err.Error() != want {
			t.Errorf("Unmarshal(%q) = %v, want Problems %q", in, err, want)
		}
	}
	// Where yaml.v3 keeps a nil, a null item is a value.
	var got struct {
		Any  []any               `yaml:"any"`
		Ptrs []*testAddress      `yaml:"ptrs"`
		Maps []map[string]string `yaml:"maps"`
	}
	if err := Unmarshal([]byte("any: [~]\nptrs: [~]\nmaps: [~]\n"), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Any) != 1 || len(got.Ptrs) != 1 || len(got.Maps) != 1 {
		t.Errorf("null items of nilable types were dropped: %+v", got)
	}
}
