package machineconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// FieldClass says whether a field of the machine config may hold a
// secret, and what shape of value it holds.
type FieldClass uint8

const (
	// Public fields hold nothing secret: names, addresses, certificates,
	// public keys, hashes of public data.
	Public FieldClass = iota + 1
	// SecretValue fields are secret as a whole: a private key, a token, a
	// symmetric key, a password hash, an HTTP header's value.
	SecretValue
	// SecretURL fields are URLs that carry a secret: a data: URL's
	// contents (base64 or percent-encoded, gzip-compressed or not), or a
	// remote URL's user info and query (a password, a signature).
	SecretURL
	// SecretText fields are text that may hold a secret among other
	// lines: a systemd unit's Environment= or ExecStart= lines.
	SecretText
	// IgnitionConfig is the ignition field: an Ignition v3 config (JSON)
	// whose own fields are classified by the paths below it. A value that
	// is not a JSON object is secret as a whole.
	IgnitionConfig
)

// String names the class as Fields' documentation does.
func (c FieldClass) String() string {
	switch c {
	case Public:
		return "public"
	case SecretValue:
		return "secret value"
	case SecretURL:
		return "secret URL"
	case SecretText:
		return "secret text"
	case IgnitionConfig:
		return "Ignition config"
	}
	return fmt.Sprintf("FieldClass(%d)", uint8(c))
}

// IsSecret reports whether a field of the class is redacted whole.
func (c FieldClass) IsSecret() bool {
	return c == SecretValue || c == SecretURL || c == SecretText
}

// Field is a leaf of the machine config's schema and its class.
type Field struct {
	// Path is the leaf's path as problems name it, with [*] standing for
	// every item of a list: $.cluster.pki.caKey,
	// $.ignition.storage.files[*].contents.source.
	Path  string
	Class FieldClass
}

// fields classifies every leaf of Config, one line each, and every leaf
// of its Ignition config (spec 3.5, which holds every field of 3.0 to
// 3.4). TestFieldsCoverTheSchema fails on a leaf of either schema that is
// missing here, and on an entry that names no leaf: whoever adds a field
// to Config decides here whether it is secret.
//
// Of Ignition, secret are: every resource's source (a data: URL carries a
// file's contents, which may be a key; a remote URL may carry credentials
// in its user info or query) and its HTTP headers' values (an
// Authorization header); the proxies (user info); password hashes (a
// crypt hash of a weak password is one dictionary away from it); and the
// contents of systemd units and drop-ins (Environment= and command lines
// carry tokens). A resource's verification hash stays: it is what tells a
// support engineer why the node refused the contents, and redaction
// markers show a prefix of a hash as well. Clevis pin configurations and
// Tang advertisements and thumbprints are public by design (clevis keeps
// them in the clear in the LUKS header). Terrarium refuses most of
// Ignition's storage sections, remote sources and passwords
// (pkg/contract/ignitionspec), but a config that carries them is exactly the
// one a support bundle is made for, so they are classified all the same.
var fields = []Field{
	{"$.apiVersion", Public},
	{"$.kind", Public},
	{"$.generation", Public},
	{"$.hostname", Public},
	{"$.network.interfaces[*].name", Public},
	{"$.network.interfaces[*].macAddress", Public},
	{"$.network.interfaces[*].dhcp", Public},
	{"$.network.interfaces[*].addresses[*]", Public},
	{"$.network.interfaces[*].gateway", Public},
	{"$.network.interfaces[*].dns[*]", Public},
	{"$.admin.name", Public},
	{"$.admin.sshAuthorizedKeys[*]", Public},
	{"$.trustedKeys[*].key", Public},
	{"$.trustedKeys[*].purposes[*]", Public},
	{"$.registry.serve", Public},
	{"$.registry.listen", Public},
	{"$.registry.peers[*]", Public},
	{"$.registry.ca", Public},
	{"$.registry.certificate", Public},
	{"$.registry.key", SecretValue},
	{"$.registry.clientCertificate", Public},
	{"$.registry.clientKey", SecretValue},
	{"$.registry.signedBundlesOnly", Public},
	{"$.cluster.name", Public},
	{"$.cluster.role", Public},
	{"$.cluster.nodeIP", Public},
	{"$.cluster.controlPlanes[*]", Public},
	{"$.cluster.podCIDR", Public},
	{"$.cluster.serviceCIDR", Public},
	{"$.cluster.token", SecretValue},
	{"$.cluster.tokenExpires", Public},
	{"$.cluster.caCert", Public},
	{"$.cluster.caCertHash", Public},
	{"$.cluster.pki.caKey", SecretValue},
	{"$.cluster.pki.frontProxyCA.cert", Public},
	{"$.cluster.pki.frontProxyCA.key", SecretValue},
	{"$.cluster.pki.etcdCA.cert", Public},
	{"$.cluster.pki.etcdCA.key", SecretValue},
	{"$.cluster.pki.serviceAccount.cert", Public},
	{"$.cluster.pki.serviceAccount.key", SecretValue},
	{"$.cluster.pki.certificateKey", SecretValue},
	{"$.cluster.secretsEncryptionKey", SecretValue},
	{"$.cluster.retiredSecretsEncryptionKeys[*]", SecretValue},
	{"$.cluster.podSecurity.enforce", Public},
	{"$.cluster.podSecurity.audit", Public},
	{"$.cluster.podSecurity.warn", Public},
	{"$.cluster.ignorePreflightErrors[*]", Public},
	{"$.cluster.backup.interval", Public},
	{"$.cluster.backup.keep", Public},
	{"$.cluster.backup.volumesPassphrase", SecretValue},
	{"$.cluster.localStorage.disabled", Public},
	{"$.cluster.localStorage.size", Public},
	{"$.cluster.localStorage.disk.path", Public},
	{"$.cluster.localStorage.disk.id", Public},
	{"$.cluster.localStorage.disk.serial", Public},
	{"$.cluster.localStorage.disk.minSize", Public},
	{"$.cluster.localStorage.disk.maxSize", Public},
	{"$.cluster.metrics.disabled", Public},
	{"$.cluster.loadBalancer.addresses[*]", Public},
	{"$.install.disk.path", Public},
	{"$.install.disk.id", Public},
	{"$.install.disk.serial", Public},
	{"$.install.disk.minSize", Public},
	{"$.install.disk.maxSize", Public},
	{"$.install.wipe", Public},
	{"$.state.reserveMiB", Public},
	{"$.state.encryption", Public},
	{"$.state.recoveryKey", Public},

	{"$.ignition", IgnitionConfig},
	{"$.ignition.ignition.version", Public},
	{"$.ignition.ignition.config.merge[*].source", SecretURL},
	{"$.ignition.ignition.config.merge[*].compression", Public},
	{"$.ignition.ignition.config.merge[*].httpHeaders[*].name", Public},
	{"$.ignition.ignition.config.merge[*].httpHeaders[*].value", SecretValue},
	{"$.ignition.ignition.config.merge[*].verification.hash", Public},
	{"$.ignition.ignition.config.replace.source", SecretURL},
	{"$.ignition.ignition.config.replace.compression", Public},
	{"$.ignition.ignition.config.replace.httpHeaders[*].name", Public},
	{"$.ignition.ignition.config.replace.httpHeaders[*].value", SecretValue},
	{"$.ignition.ignition.config.replace.verification.hash", Public},
	{"$.ignition.ignition.proxy.httpProxy", SecretURL},
	{"$.ignition.ignition.proxy.httpsProxy", SecretURL},
	{"$.ignition.ignition.proxy.noProxy[*]", Public},
	{"$.ignition.ignition.security.tls.certificateAuthorities[*].source", SecretURL},
	{"$.ignition.ignition.security.tls.certificateAuthorities[*].compression", Public},
	{"$.ignition.ignition.security.tls.certificateAuthorities[*].httpHeaders[*].name", Public},
	{"$.ignition.ignition.security.tls.certificateAuthorities[*].httpHeaders[*].value", SecretValue},
	{"$.ignition.ignition.security.tls.certificateAuthorities[*].verification.hash", Public},
	{"$.ignition.ignition.timeouts.httpResponseHeaders", Public},
	{"$.ignition.ignition.timeouts.httpTotal", Public},
	{"$.ignition.kernelArguments.shouldExist[*]", Public},
	{"$.ignition.kernelArguments.shouldNotExist[*]", Public},
	{"$.ignition.passwd.groups[*].name", Public},
	{"$.ignition.passwd.groups[*].gid", Public},
	{"$.ignition.passwd.groups[*].passwordHash", SecretValue},
	{"$.ignition.passwd.groups[*].shouldExist", Public},
	{"$.ignition.passwd.groups[*].system", Public},
	{"$.ignition.passwd.users[*].name", Public},
	{"$.ignition.passwd.users[*].uid", Public},
	{"$.ignition.passwd.users[*].passwordHash", SecretValue},
	{"$.ignition.passwd.users[*].sshAuthorizedKeys[*]", Public},
	{"$.ignition.passwd.users[*].gecos", Public},
	{"$.ignition.passwd.users[*].homeDir", Public},
	{"$.ignition.passwd.users[*].shell", Public},
	{"$.ignition.passwd.users[*].primaryGroup", Public},
	{"$.ignition.passwd.users[*].groups[*]", Public},
	{"$.ignition.passwd.users[*].noCreateHome", Public},
	{"$.ignition.passwd.users[*].noLogInit", Public},
	{"$.ignition.passwd.users[*].noUserGroup", Public},
	{"$.ignition.passwd.users[*].shouldExist", Public},
	{"$.ignition.passwd.users[*].system", Public},
	{"$.ignition.storage.directories[*].path", Public},
	{"$.ignition.storage.directories[*].mode", Public},
	{"$.ignition.storage.directories[*].overwrite", Public},
	{"$.ignition.storage.directories[*].user.id", Public},
	{"$.ignition.storage.directories[*].user.name", Public},
	{"$.ignition.storage.directories[*].group.id", Public},
	{"$.ignition.storage.directories[*].group.name", Public},
	{"$.ignition.storage.files[*].path", Public},
	{"$.ignition.storage.files[*].mode", Public},
	{"$.ignition.storage.files[*].overwrite", Public},
	{"$.ignition.storage.files[*].user.id", Public},
	{"$.ignition.storage.files[*].user.name", Public},
	{"$.ignition.storage.files[*].group.id", Public},
	{"$.ignition.storage.files[*].group.name", Public},
	{"$.ignition.storage.files[*].contents.source", SecretURL},
	{"$.ignition.storage.files[*].contents.compression", Public},
	{"$.ignition.storage.files[*].contents.httpHeaders[*].name", Public},
	{"$.ignition.storage.files[*].contents.httpHeaders[*].value", SecretValue},
	{"$.ignition.storage.files[*].contents.verification.hash", Public},
	{"$.ignition.storage.files[*].append[*].source", SecretURL},
	{"$.ignition.storage.files[*].append[*].compression", Public},
	{"$.ignition.storage.files[*].append[*].httpHeaders[*].name", Public},
	{"$.ignition.storage.files[*].append[*].httpHeaders[*].value", SecretValue},
	{"$.ignition.storage.files[*].append[*].verification.hash", Public},
	{"$.ignition.storage.links[*].path", Public},
	{"$.ignition.storage.links[*].target", Public},
	{"$.ignition.storage.links[*].hard", Public},
	{"$.ignition.storage.links[*].overwrite", Public},
	{"$.ignition.storage.links[*].user.id", Public},
	{"$.ignition.storage.links[*].user.name", Public},
	{"$.ignition.storage.links[*].group.id", Public},
	{"$.ignition.storage.links[*].group.name", Public},
	{"$.ignition.storage.disks[*].device", Public},
	{"$.ignition.storage.disks[*].wipeTable", Public},
	{"$.ignition.storage.disks[*].partitions[*].number", Public},
	{"$.ignition.storage.disks[*].partitions[*].label", Public},
	{"$.ignition.storage.disks[*].partitions[*].guid", Public},
	{"$.ignition.storage.disks[*].partitions[*].typeGuid", Public},
	{"$.ignition.storage.disks[*].partitions[*].sizeMiB", Public},
	{"$.ignition.storage.disks[*].partitions[*].startMiB", Public},
	{"$.ignition.storage.disks[*].partitions[*].resize", Public},
	{"$.ignition.storage.disks[*].partitions[*].shouldExist", Public},
	{"$.ignition.storage.disks[*].partitions[*].wipePartitionEntry", Public},
	{"$.ignition.storage.raid[*].name", Public},
	{"$.ignition.storage.raid[*].level", Public},
	{"$.ignition.storage.raid[*].devices[*]", Public},
	{"$.ignition.storage.raid[*].spares", Public},
	{"$.ignition.storage.raid[*].options[*]", Public},
	{"$.ignition.storage.filesystems[*].device", Public},
	{"$.ignition.storage.filesystems[*].format", Public},
	{"$.ignition.storage.filesystems[*].label", Public},
	{"$.ignition.storage.filesystems[*].uuid", Public},
	{"$.ignition.storage.filesystems[*].path", Public},
	{"$.ignition.storage.filesystems[*].options[*]", Public},
	{"$.ignition.storage.filesystems[*].mountOptions[*]", Public},
	{"$.ignition.storage.filesystems[*].wipeFilesystem", Public},
	{"$.ignition.storage.luks[*].name", Public},
	{"$.ignition.storage.luks[*].device", Public},
	{"$.ignition.storage.luks[*].label", Public},
	{"$.ignition.storage.luks[*].uuid", Public},
	{"$.ignition.storage.luks[*].discard", Public},
	{"$.ignition.storage.luks[*].wipeVolume", Public},
	{"$.ignition.storage.luks[*].options[*]", Public},
	{"$.ignition.storage.luks[*].openOptions[*]", Public},
	{"$.ignition.storage.luks[*].keyFile.source", SecretURL},
	{"$.ignition.storage.luks[*].keyFile.compression", Public},
	{"$.ignition.storage.luks[*].keyFile.httpHeaders[*].name", Public},
	{"$.ignition.storage.luks[*].keyFile.httpHeaders[*].value", SecretValue},
	{"$.ignition.storage.luks[*].keyFile.verification.hash", Public},
	{"$.ignition.storage.luks[*].cex.enabled", Public},
	{"$.ignition.storage.luks[*].clevis.tpm2", Public},
	{"$.ignition.storage.luks[*].clevis.threshold", Public},
	{"$.ignition.storage.luks[*].clevis.tang[*].url", Public},
	{"$.ignition.storage.luks[*].clevis.tang[*].thumbprint", Public},
	{"$.ignition.storage.luks[*].clevis.tang[*].advertisement", Public},
	{"$.ignition.storage.luks[*].clevis.custom.pin", Public},
	{"$.ignition.storage.luks[*].clevis.custom.config", Public},
	{"$.ignition.storage.luks[*].clevis.custom.needsNetwork", Public},
	{"$.ignition.systemd.units[*].name", Public},
	{"$.ignition.systemd.units[*].enabled", Public},
	{"$.ignition.systemd.units[*].mask", Public},
	{"$.ignition.systemd.units[*].contents", SecretText},
	{"$.ignition.systemd.units[*].dropins[*].name", Public},
	{"$.ignition.systemd.units[*].dropins[*].contents", SecretText},
}

// Fields returns the classification of every leaf of the machine config,
// its Ignition config's included, in a new slice.
func Fields() []Field { return slices.Clone(fields) }

// Secret is a value of a config that is, or may be, secret.
type Secret struct {
	// Path is where the value is: $.cluster.token,
	// $.ignition.storage.files[2].contents.source.
	Path string
	// Field is the path of the entry of Fields that classifies the value
	// ($.ignition.storage.files[*].contents.source), or "" when none
	// names its path: a key of the Ignition config that is not in
	// Ignition's spec (a typo, a field of a later spec), or a value of
	// another shape than its field's (an object where a string belongs).
	// Such a value is treated as secret, since nothing says it is not.
	Field string
	// Class is the field's class: SecretValue, SecretURL or SecretText;
	// IgnitionConfig for an Ignition config that is not a JSON object,
	// secret as a whole; SecretValue for a value that Field does not name.
	Class FieldClass
	// Value is the value as the config holds it; for a list, object,
	// number or boolean of an Ignition config, its JSON.
	Value string
}

// RedactSecrets returns a copy of c in which every value that is not
// public is replaced with what redact returns for it: the value of every
// field that Fields classifies as secret, and in the Ignition config every
// value at a path that no field names, whatever its type (a list or an
// object as a whole). An Ignition config that is not one JSON object is
// replaced whole; one with something replaced is written out again as
// indented JSON, its keys sorted. Empty values (an empty string, list or
// object, a JSON null) are kept. A field of Config that Fields does not
// name (which TestFieldsCoverTheSchema forbids) is redacted too, or
// zeroed when it is not a string. c is not modified.
func (c *Config) RedactSecrets(redact func(Secret) string) *Config {
	if c == nil {
		return nil
	}
	w := secretWalker{redact: redact}
	out := new(Config)
	w.value(reflect.ValueOf(out).Elem(), reflect.ValueOf(c).Elem(), schemaTree(), strictyaml.Root())
	return out
}

// Secrets lists the values of c that RedactSecrets replaces, in the
// order of the schema (an Ignition object's keys sorted).
func (c *Config) Secrets() []Secret {
	var out []Secret
	c.RedactSecrets(func(s Secret) string {
		out = append(out, s)
		return ""
	})
	return out
}

// fieldNode is a node of the tree of Fields' paths.
type fieldNode struct {
	// field is the entry of Fields whose path ends here; its Class is 0
	// when none does.
	field Field
	// children are the keys below an object; items is what a list holds.
	children map[string]*fieldNode
	items    *fieldNode
}

// child is the node of key name below n, or nil.
func (n *fieldNode) child(name string) *fieldNode {
	if n == nil {
		return nil
	}
	return n.children[name]
}

// item is the node of a list's items below n, or nil.
func (n *fieldNode) item() *fieldNode {
	if n == nil {
		return nil
	}
	return n.items
}

// childrenOrNil is n's children, nil for a nil n.
func (n *fieldNode) childrenOrNil() map[string]*fieldNode {
	if n == nil {
		return nil
	}
	return n.children
}

// class is the class of the field that ends at n, 0 when none does.
func (n *fieldNode) class() FieldClass {
	if n == nil {
		return 0
	}
	return n.field.Class
}

// schemaTree is fields as a tree: a few hundred entries, built per call
// rather than kept in package state. TestFieldsCoverTheSchema builds it
// too, so a malformed entry fails a test before it could panic here.
func schemaTree() *fieldNode {
	root, err := buildTree(fields)
	if err != nil {
		panic("machineconfig: " + err.Error())
	}
	return root
}

// buildTree makes the tree of fs' paths. Each path is $ followed by .key
// and [*] steps, and is listed once.
func buildTree(fs []Field) (*fieldNode, error) {
	root := &fieldNode{}
	for _, f := range fs {
		rest, ok := strings.CutPrefix(f.Path, "$")
		if !ok {
			return nil, fmt.Errorf("field %q does not start with $", f.Path)
		}
		n := root
		for rest != "" {
			if after, ok := strings.CutPrefix(rest, "[*]"); ok {
				if n.items == nil {
					n.items = &fieldNode{}
				}
				n, rest = n.items, after
				continue
			}
			after, ok := strings.CutPrefix(rest, ".")
			if !ok {
				return nil, fmt.Errorf("field %q: %q is neither .key nor [*]", f.Path, rest)
			}
			end := strings.IndexAny(after, ".[")
			if end < 0 {
				end = len(after)
			}
			name := after[:end]
			if name == "" {
				return nil, fmt.Errorf("field %q has an empty key", f.Path)
			}
			if n.children == nil {
				n.children = map[string]*fieldNode{}
			}
			if n.children[name] == nil {
				n.children[name] = &fieldNode{}
			}
			n, rest = n.children[name], after[end:]
		}
		if n.field.Class != 0 {
			return nil, fmt.Errorf("field %q is listed twice", f.Path)
		}
		if f.Class < Public || f.Class > IgnitionConfig {
			return nil, fmt.Errorf("field %q has no class", f.Path)
		}
		n.field = f
	}
	return root, nil
}

// configPkg is this package's path: its struct types are walked field by
// field, others (time.Time) are leaves.
var configPkg = reflect.TypeFor[Config]().PkgPath()

// yamlKey is the key of an exported struct field in YAML, following
// yaml.v3: the tag's name or the lower-cased field name. inline says the
// field's own fields are its parent's; ok is false for a field YAML skips.
// Unexported fields are skipped (Config has none that YAML would see:
// TestFieldsCoverTheSchema says so).
func yamlKey(f reflect.StructField) (key string, inline, ok bool) {
	tag := f.Tag.Get("yaml")
	if tag == "-" || !f.IsExported() {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if slices.Contains(strings.Split(opts, ","), "inline") {
		return "", true, true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false, true
}

// secretWalker copies a Config, redacting as it goes.
type secretWalker struct {
	redact func(Secret) string
}

// value sets dst, a zero value of src's type, to a copy of src at path p,
// classified by n (nil: no field names p).
func (w *secretWalker) value(dst, src reflect.Value, n *fieldNode, p strictyaml.Path) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.New(src.Type().Elem()))
		w.value(dst.Elem(), src.Elem(), n, p)
	case reflect.Struct:
		if src.Type().PkgPath() != configPkg {
			w.leaf(dst, src, n, p)
			return
		}
		dst.Set(src) // unexported fields, which YAML does not see either
		t := src.Type()
		for i := range t.NumField() {
			key, inline, ok := yamlKey(t.Field(i))
			if !ok {
				continue
			}
			field := dst.Field(i)
			field.Set(reflect.Zero(field.Type()))
			if inline {
				w.value(field, src.Field(i), n, p)
			} else {
				w.value(field, src.Field(i), n.child(key), p.Field(key))
			}
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.MakeSlice(src.Type(), src.Len(), src.Len()))
		for i := range src.Len() {
			w.value(dst.Index(i), src.Index(i), n.item(), p.Index(i))
		}
	default:
		w.leaf(dst, src, n, p)
	}
}

// leaf sets dst to src, or to src's replacement when n does not say it
// is public.
func (w *secretWalker) leaf(dst, src reflect.Value, n *fieldNode, p strictyaml.Path) {
	class := n.class()
	switch {
	case class == Public:
		dst.Set(src)
	case src.Kind() != reflect.String:
		// No secret field is anything but a string; an unclassified
		// value of another kind is left at its zero value.
	case src.String() == "":
	case class == IgnitionConfig:
		dst.SetString(w.ignition(src.String(), n, p))
	case class.IsSecret():
		dst.SetString(w.redact(Secret{Path: p.String(), Field: n.field.Path, Class: class, Value: src.String()}))
	default:
		dst.SetString(w.redact(Secret{Path: p.String(), Class: SecretValue, Value: src.String()}))
	}
}

// ignition redacts the Ignition config doc at p, classified by n.
func (w *secretWalker) ignition(doc string, n *fieldNode, p strictyaml.Path) string {
	whole := func() string {
		return w.redact(Secret{Path: p.String(), Field: n.field.Path, Class: IgnitionConfig, Value: doc})
	}
	obj, err := decodeObject(doc)
	if err != nil {
		return whole()
	}
	if !w.object(obj, n, p) {
		return doc
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(obj); err != nil {
		return whole() // not reached: decoded JSON encodes
	}
	return b.String()
}

// decodeObject decodes doc, which must be one JSON object, keeping
// numbers as written.
func decodeObject(doc string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("null, not an object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value")
	}
	return obj, nil
}

// object redacts obj's values in place, key by key in sorted order, and
// reports whether it replaced any.
func (w *secretWalker) object(obj map[string]any, n *fieldNode, p strictyaml.Path) bool {
	changed := false
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v, c := w.json(obj[k], n.child(k), p.Field(k))
		obj[k] = v
		changed = changed || c
	}
	return changed
}

// json redacts a decoded JSON value at p, classified by n, in place where
// it can; it returns the value to keep and whether it differs.
func (w *secretWalker) json(v any, n *fieldNode, p strictyaml.Path) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		if len(n.childrenOrNil()) > 0 {
			return v, w.object(v, n, p)
		}
	case []any:
		if n.item() != nil {
			changed := false
			for i := range v {
				var c bool
				v[i], c = w.json(v[i], n.items, p.Index(i))
				changed = changed || c
			}
			return v, changed
		}
	}
	return w.jsonLeaf(v, n, p)
}

// jsonLeaf keeps a scalar of a public field and an empty value, and
// replaces anything else: the string of a secret field, and a value of a
// shape or at a path that no field names.
func (w *secretWalker) jsonLeaf(v any, n *fieldNode, p strictyaml.Path) (any, bool) {
	switch v := v.(type) {
	case nil:
		return nil, false
	case string:
		if v == "" {
			return v, false
		}
	case map[string]any:
		if len(v) == 0 {
			return v, false
		}
	case []any:
		if len(v) == 0 {
			return v, false
		}
	}
	_, scalar := v.(map[string]any)
	_, list := v.([]any)
	scalar = !scalar && !list
	class := n.class()
	if class == Public && scalar {
		return v, false
	}
	s := Secret{Path: p.String(), Class: SecretValue}
	if class.IsSecret() && scalar {
		s.Field, s.Class = n.field.Path, class
	}
	if str, ok := v.(string); ok {
		s.Value = str
	} else {
		b, _ := json.Marshal(v) // decoded JSON encodes
		s.Value = string(b)
	}
	return w.redact(s), true
}
