package machineconfig

import (
	"encoding/json"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	ign30 "github.com/coreos/ignition/v2/config/v3_0/types"
	ign31 "github.com/coreos/ignition/v2/config/v3_1/types"
	ign32 "github.com/coreos/ignition/v2/config/v3_2/types"
	ign33 "github.com/coreos/ignition/v2/config/v3_3/types"
	ign34 "github.com/coreos/ignition/v2/config/v3_4/types"
	ign35 "github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// ignitionSpecs are the Ignition config types of every spec the node
// takes (pkg/contract/ignitionspec), the newest last.
var ignitionSpecs = []reflect.Type{
	reflect.TypeFor[ign30.Config](), reflect.TypeFor[ign31.Config](), reflect.TypeFor[ign32.Config](),
	reflect.TypeFor[ign33.Config](), reflect.TypeFor[ign34.Config](), reflect.TypeFor[ign35.Config](),
}

// schemaLeaves lists the path of every leaf of Config's YAML schema, with
// [*] for a list's items, and below $.ignition every leaf of the JSON
// schema of each Ignition spec.
func schemaLeaves(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
		}
	}
	var yamlWalk func(typ reflect.Type, path string)
	yamlWalk = func(typ reflect.Type, path string) {
		switch typ.Kind() {
		case reflect.Pointer:
			yamlWalk(typ.Elem(), path)
		case reflect.Slice:
			yamlWalk(typ.Elem(), path+"[*]")
		case reflect.Struct:
			if typ.PkgPath() != configPkg {
				add(path)
				return
			}
			for f := range typ.Fields() {
				if !f.IsExported() {
					assert.True(t, f.Tag.Get("yaml") == "" && !f.Anonymous,
						"%s.%s: an unexported field YAML reads, which RedactSecrets cannot copy", typ, f.Name)
					continue
				}
				key, inline, ok := yamlKey(f)
				switch {
				case !ok:
				case inline:
					yamlWalk(f.Type, path)
				default:
					yamlWalk(f.Type, path+"."+key)
				}
			}
		default:
			add(path)
		}
	}
	yamlWalk(reflect.TypeFor[Config](), "$")
	for _, spec := range ignitionSpecs {
		jsonWalk(spec, "$.ignition", add)
	}
	return slices.Sorted(maps.Keys(seen))
}

// jsonWalk calls leaf with the path of every leaf of typ's JSON schema,
// following encoding/json: the tag's name or the field's, embedded
// structs without a name inlined.
func jsonWalk(typ reflect.Type, path string, leaf func(string)) {
	switch typ.Kind() {
	case reflect.Pointer:
		jsonWalk(typ.Elem(), path, leaf)
	case reflect.Slice:
		jsonWalk(typ.Elem(), path+"[*]", leaf)
	case reflect.Struct:
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-" || !f.IsExported() && !f.Anonymous:
			case name == "" && f.Anonymous:
				jsonWalk(f.Type, path, leaf)
			case name == "":
				jsonWalk(f.Type, path+"."+f.Name, leaf)
			default:
				jsonWalk(f.Type, path+"."+name, leaf)
			}
		}
	default:
		leaf(path)
	}
}

// TestFieldsCoverTheSchema: every leaf of Config, and of the Ignition
// config it carries, is classified, and every entry of fields names one.
// A new field of Config fails here until it is added to fields in
// secrets.go: as Public, or as the kind of secret it holds.
func TestFieldsCoverTheSchema(t *testing.T) {
	_, err := buildTree(fields)
	require.NoError(t, err)

	schema := schemaLeaves(t)
	require.Contains(t, schema, "$.cluster.pki.caKey", "the walk reaches through pointers")
	require.Contains(t, schema, "$.ignition.storage.files[*].path", "the walk reaches into Ignition's embedded structs")
	listed := map[string]FieldClass{}
	for _, f := range Fields() {
		listed[f.Path] = f.Class
	}
	for _, p := range schema {
		if _, ok := listed[p]; !ok && p != "$.ignition" {
			t.Errorf("%s is not classified: add it to fields in secrets.go, as Public or as the secret it holds", p)
		}
	}
	inSchema := map[string]bool{}
	for _, p := range schema {
		inSchema[p] = true
	}
	for _, f := range Fields() {
		if !inSchema[f.Path] {
			t.Errorf("%s (%s) in fields names no field of Config or of Ignition's spec 3.0 to 3.5: remove or rename it", f.Path, f.Class)
		}
		if f.Class == IgnitionConfig {
			assert.Equal(t, "$.ignition", f.Path, "only the ignition field holds an Ignition config")
		}
	}
	assert.Equal(t, IgnitionConfig, listed["$.ignition"])
}

// TestSecretNamesAreSecret: a field named like a secret is classified as
// one, unless it is one of the public fields named here, so that a key
// listed as Public by mistake does not pass unseen.
func TestSecretNamesAreSecret(t *testing.T) {
	public := map[string]bool{
		"$.cluster.tokenExpires":                                 true, // a time
		"$.trustedKeys[*].key":                                   true, // ed25519 public keys
		"$.state.recoveryKey":                                    true, // the escrow's public half
		"$.admin.sshAuthorizedKeys[*]":                           true,
		"$.ignition.passwd.users[*].sshAuthorizedKeys[*]":        true,
		"$.ignition.storage.luks[*].keyFile.compression":         true, // the resource's own fields
		"$.ignition.storage.luks[*].keyFile.verification.hash":   true,
		"$.ignition.storage.luks[*].keyFile.httpHeaders[*].name": true,
	}
	secretName := regexp.MustCompile(`(?i)(key|token|passw|secret|credential|private)[^.]*$`)
	for _, f := range Fields() {
		if secretName.MatchString(f.Path) && !f.Class.IsSecret() {
			assert.True(t, public[f.Path], "%s is named like a secret but classified %s", f.Path, f.Class)
		}
	}
}

func TestBuildTreeRefuses(t *testing.T) {
	for _, fs := range [][]Field{
		{{"cluster.token", SecretValue}},
		{{"$.a", Public}, {"$.a", SecretValue}},
		{{"$.a..b", Public}},
		{{"$.a[0]", Public}},
		{{"$.a", 0}},
	} {
		_, err := buildTree(fs)
		assert.Error(t, err, "%v", fs)
	}
}

// filler gives every leaf of a value a distinct non-zero value and records
// the strings by their path.
type filler struct {
	strs map[string]string
	n    int
}

// fill sets v, with path p (its lists' items at [0]), in YAML (json false)
// or JSON naming. Config's ignition is set to doc.
func (f *filler) fill(v reflect.Value, p string, jsonNames bool, doc string) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem(), p, jsonNames, doc)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		f.fill(v.Index(0), p+"[0]", jsonNames, doc)
	case reflect.Struct:
		if !jsonNames && v.Type().PkgPath() != configPkg {
			return // time.Time: left zero
		}
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			var name string
			inline := false
			if jsonNames {
				name, _, _ = strings.Cut(sf.Tag.Get("json"), ",")
				inline = name == "" && sf.Anonymous
			} else {
				var ok bool
				if name, inline, ok = yamlKey(sf); !ok {
					continue
				}
			}
			if inline {
				f.fill(v.Field(i), p, jsonNames, doc)
			} else {
				f.fill(v.Field(i), p+"."+name, jsonNames, doc)
			}
		}
	case reflect.String:
		s := "v" + strconv.Itoa(f.n) + ":" + p
		if p == "$.ignition" {
			s = doc
		}
		f.n++
		f.strs[p] = s
		v.SetString(s)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		f.n++
		v.SetInt(int64(f.n))
	case reflect.Uint64:
		f.n++
		v.SetUint(uint64(f.n))
	default:
		panic("fill: " + v.Kind().String() + " at " + p)
	}
}

// collect records the strings of a value by path, in YAML naming, and
// of an Ignition config's decoded JSON.
func collect(v any, p string, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			collect(e, p+"."+k, out)
		}
	case []any:
		for i, e := range v {
			collect(e, p+"["+strconv.Itoa(i)+"]", out)
		}
	case string:
		out[p] = v
	}
}

// pattern is the field path of a concrete path: every [i] as [*].
func pattern(p string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(p, '[')
		if i < 0 {
			return b.String() + p
		}
		j := strings.IndexByte(p[i:], ']')
		b.WriteString(p[:i] + "[*]")
		p = p[i+j+1:]
	}
}

// TestRedactSecretsEveryField fills every leaf of a Config and of its
// Ignition config (spec 3.5) with a value of its own: RedactSecrets
// replaces exactly the values of the fields classified secret, and keeps
// every other.
func TestRedactSecretsEveryField(t *testing.T) {
	ign := filler{strs: map[string]string{}}
	var ic ign35.Config
	ign.fill(reflect.ValueOf(&ic).Elem(), "$.ignition", true, "")
	doc, err := json.Marshal(ic)
	require.NoError(t, err)

	cf := filler{strs: map[string]string{}, n: ign.n}
	var c Config
	cf.fill(reflect.ValueOf(&c).Elem(), "$", false, string(doc))
	before, err := c.Marshal()
	require.NoError(t, err)

	var got []Secret
	out := c.RedactSecrets(func(s Secret) string {
		got = append(got, s)
		return "R:" + s.Field
	})
	after, err := c.Marshal()
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "RedactSecrets modified its argument")

	values := maps.Clone(cf.strs)
	delete(values, "$.ignition")
	maps.Copy(values, ign.strs)
	var wantFields, gotFields []string
	for _, f := range Fields() {
		if f.Class.IsSecret() {
			wantFields = append(wantFields, f.Path)
		}
	}
	for _, s := range got {
		gotFields = append(gotFields, s.Field)
		assert.Equal(t, pattern(s.Path), s.Field)
		assert.Equal(t, values[s.Path], s.Value, s.Path)
		assert.Equal(t, s.Class, classOf(s.Field), s.Path)
	}
	assert.ElementsMatch(t, wantFields, gotFields, "the secrets reported are those of the fields classified secret")

	// What comes out: every secret replaced, every public string kept.
	outStrs := map[string]string{}
	var y any
	data, err := out.Marshal()
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &y))
	collect(y, "$", outStrs)
	var ij any
	require.NoError(t, json.Unmarshal([]byte(out.Ignition), &ij))
	delete(outStrs, "$.ignition")
	collect(ij, "$.ignition", outStrs)
	for p, v := range values {
		if classOf(pattern(p)).IsSecret() {
			assert.Equal(t, "R:"+pattern(p), outStrs[p], p)
		} else {
			assert.Equal(t, v, outStrs[p], p)
		}
	}
	assert.Len(t, outStrs, len(values), "no string lost or added")
}

func classOf(path string) FieldClass {
	for _, f := range fields {
		if f.Path == path {
			return f.Class
		}
	}
	return 0
}

// TestRedactSecretsIgnition: what of an Ignition config is replaced, and
// with which Secret, beyond its fields' values: what the spec does not
// name and what is not a config.
func TestRedactSecretsIgnition(t *testing.T) {
	const hash = "$6$rounds=4096$saltsalt$0123456789abcdef"
	tests := []struct {
		name, doc string
		want      []Secret
		// out is the JSON the config holds after, when it is JSON.
		out string
	}{
		{name: "nothing secret", doc: `{"ignition": {"version": "3.4.0"}, "storage": {"directories": [{"path": "/var/x", "mode": 493}]}}`},
		{name: "empty values", doc: `{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "u", "passwordHash": ""}], "groups": []}, "storage": {}, "systemd": null}`},
		{
			name: "password hash", doc: `{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "u", "passwordHash": "` + hash + `"}]}}`,
			want: []Secret{{"$.ignition.passwd.users[0].passwordHash", "$.ignition.passwd.users[*].passwordHash", SecretValue, hash}},
			out:  `{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "u", "passwordHash": "<>"}]}}`,
		},
		{
			name: "unknown key", doc: `{"ignition": {"version": "3.4.0"}, "secrets": {"a": ["b", 1]}, "passwd": {"users": [{"name": "u", "PasswordHash": "` + hash + `"}]}}`,
			want: []Secret{
				{"$.ignition.passwd.users[0].PasswordHash", "", SecretValue, hash},
				{"$.ignition.secrets", "", SecretValue, `{"a":["b",1]}`},
			},
			out: `{"ignition": {"version": "3.4.0"}, "secrets": "<>", "passwd": {"users": [{"name": "u", "PasswordHash": "<>"}]}}`,
		},
		{
			name: "unknown scalars", doc: `{"ignition": {"version": "3.4.0", "pin": 1234, "ok": true}}`,
			want: []Secret{
				{"$.ignition.ignition.ok", "", SecretValue, "true"},
				{"$.ignition.ignition.pin", "", SecretValue, "1234"},
			},
			out: `{"ignition": {"version": "3.4.0", "pin": "<>", "ok": "<>"}}`,
		},
		{
			name: "object in a secret field", doc: `{"storage": {"files": [{"path": "/a", "contents": {"source": {"k": "v"}}}]}}`,
			want: []Secret{{"$.ignition.storage.files[0].contents.source", "", SecretValue, `{"k":"v"}`}},
			out:  `{"storage": {"files": [{"path": "/a", "contents": {"source": "<>"}}]}}`,
		},
		{
			name: "list where an object belongs", doc: `{"storage": ["x"]}`,
			want: []Secret{{"$.ignition.storage", "", SecretValue, `["x"]`}},
			out:  `{"storage": "<>"}`,
		},
		{
			name: "object in a public field", doc: `{"storage": {"files": [{"path": {"p": "q"}}]}}`,
			want: []Secret{{"$.ignition.storage.files[0].path", "", SecretValue, `{"p":"q"}`}},
			out:  `{"storage": {"files": [{"path": "<>"}]}}`,
		},
		{name: "scalar of another type in a public field", doc: `{"storage": {"files": [{"path": 5, "mode": "0644"}]}}`},
		{name: "not JSON", doc: "{ not json", want: []Secret{{"$.ignition", "$.ignition", IgnitionConfig, "{ not json"}}},
		{name: "YAML", doc: "ignition:\n  version: 3.4.0\n", want: []Secret{{"$.ignition", "$.ignition", IgnitionConfig, "ignition:\n  version: 3.4.0\n"}}},
		{name: "a list", doc: `[{}]`, want: []Secret{{"$.ignition", "$.ignition", IgnitionConfig, `[{}]`}}},
		{name: "null", doc: `null`, want: []Secret{{"$.ignition", "$.ignition", IgnitionConfig, `null`}}},
		{name: "two objects", doc: `{} {"a": 1}`, want: []Secret{{"$.ignition", "$.ignition", IgnitionConfig, `{} {"a": 1}`}}},
		{name: "trailing garbage", doc: `{}]`, want: []Secret{{"$.ignition", "$.ignition", IgnitionConfig, `{}]`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{Hostname: "n", Ignition: tt.doc}
			out := c.RedactSecrets(func(Secret) string { return "<>" })
			assert.Equal(t, tt.want, c.Secrets())
			assert.Equal(t, tt.doc, c.Ignition, "the argument is untouched")
			assert.Equal(t, "n", out.Hostname)
			switch {
			case len(tt.want) == 0:
				assert.Equal(t, tt.doc, out.Ignition, "a config with nothing to replace is kept as written")
			case tt.out != "":
				assert.JSONEq(t, tt.out, out.Ignition)
				assert.True(t, strings.HasPrefix(out.Ignition, "{\n  \""), "written out indented: %s", out.Ignition)
			default:
				assert.Equal(t, "<>", out.Ignition)
			}
		})
	}
}

// TestRedactSecretsCopies: the copy shares nothing the caller could
// change through it, and a nil config stays nil.
func TestRedactSecretsCopies(t *testing.T) {
	c := &Config{
		Hostname: "n", Network: Network{Interfaces: []Interface{{Name: "en*", DNS: []string{"10.0.0.1"}}}},
		Cluster: &Cluster{Token: "abcdef.0123456789abcdef", PKI: &ClusterPKI{CAKey: "k"}},
	}
	out := c.RedactSecrets(func(s Secret) string { return "<" + s.Path + ">" })
	assert.Equal(t, "<$.cluster.token>", out.Cluster.Token)
	assert.Equal(t, "<$.cluster.pki.caKey>", out.Cluster.PKI.CAKey)
	out.Network.Interfaces[0].DNS[0] = "x"
	out.Cluster.PKI.FrontProxyCA.Cert = "x"
	assert.Equal(t, "10.0.0.1", c.Network.Interfaces[0].DNS[0])
	assert.Empty(t, c.Cluster.PKI.FrontProxyCA.Cert)
	assert.Equal(t, "abcdef.0123456789abcdef", c.Cluster.Token)
	assert.Nil(t, (*Config)(nil).RedactSecrets(func(Secret) string { return "" }))
}

// FuzzRedactSecrets feeds Ignition configs (the seed corpus is in
// testdata/fuzz/FuzzRedactSecrets) to RedactSecrets: the argument is
// untouched; nothing secret is left, that is, every value the redacted
// config still reports as secret is a replacement; a JSON object stays
// one; and a config with nothing secret is kept byte for byte.
func FuzzRedactSecrets(f *testing.F) {
	f.Add(`{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "u", "passwordHash": "$6$x$y"}]}}`)
	f.Add(`{"storage": {"files": [{"path": "/a", "contents": {"source": "data:,secret"}, "append": [{"source": {"x": 1}}]}]}}`)
	f.Add(`{"systemd": {"units": [{"name": "a.service", "contents": "[Service]\nEnvironment=T=1", "dropins": [{"name": "x.conf", "contents": "y"}]}]}}`)
	f.Add(`{"a": 1.5e300, "b": [null, {}], "ignition": {"version": 1}}`)
	f.Add(`{} x`)
	const marker = "[R]"
	f.Fuzz(func(t *testing.T, doc string) {
		c := &Config{Ignition: doc}
		n := 0
		out := c.RedactSecrets(func(s Secret) string {
			if s.Value == "" {
				t.Fatalf("empty value reported at %s", s.Path)
			}
			n++
			return marker
		})
		if c.Ignition != doc {
			t.Fatalf("the argument changed: %q", c.Ignition)
		}
		for _, s := range out.Secrets() {
			if s.Value != marker {
				t.Fatalf("%s still holds %q after redaction:\n%s", s.Path, s.Value, out.Ignition)
			}
		}
		if n == 0 && out.Ignition != doc {
			t.Fatalf("nothing redacted, yet the config changed: %q", out.Ignition)
		}
		if _, err := decodeObject(doc); err == nil {
			if _, err := decodeObject(out.Ignition); err != nil {
				t.Fatalf("a JSON object became %q: %v", out.Ignition, err)
			}
		}
	})
}
