package support

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Secrets no pattern of the Redactor knows: only the classification of
// the config's fields can find them.
const (
	testToken    = "tok-7c1e0b9a4f2d6e83a5b1c9d7"
	testPassword = "correct horse battery staple 42"
	// testHash is shaped like a SHA-512-crypt hash.
	testHash = "$6$rounds=5000$Ab3dEf9hIjKlMnOp$x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.x9Z.xy"
	// keepSSHKey and the other keep values are public values of the
	// configs the tests redact, which must survive.
	keepSSHKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeepKeepKeepKeepKeepKeepKeepKeepKeepKeep keeper@lab"
)

var (
	// dataURLs and base64Runs find what an output may hold encoded.
	dataURLs   = regexp.MustCompile(`data:[^\s"']*`)
	base64Runs = regexp.MustCompile(`[A-Za-z0-9+/_-]{20,}={0,2}`)
)

// secretForms are the shapes of secrets an output must not hold: as is,
// trimmed, base64 (standard and URL-safe), percent-encoded, and each line
// of a PEM body.
func secretForms(secrets ...string) []string {
	out := needles(secrets...)
	for _, s := range secrets {
		out = append(out, base64.URLEncoding.EncodeToString([]byte(s)), url.PathEscape(s), url.QueryEscape(s))
	}
	return out
}

// decodedForms are text and what it decodes to: every data: URL and
// every run of base64 in it decoded, and the whole percent-decoded.
func decodedForms(text string) []string {
	out := []string{text}
	for _, m := range dataURLs.FindAllString(text, -1) {
		if d, ok := parseDataURL(m); ok {
			out = append(out, string(d.data))
		}
	}
	for _, m := range base64Runs.FindAllString(text, -1) {
		if b, err := decodeBase64(m); err == nil {
			out = append(out, string(b))
			if plain, err := gunzipCapped(b, maxSecretFile); err == nil {
				out = append(out, string(plain))
			}
		}
	}
	if u, err := url.PathUnescape(text); err == nil {
		out = append(out, u)
	}
	return out
}

// assertNoSecret fails when text, or what it decodes to, holds a form
// of a secret.
func assertNoSecret(t *testing.T, name, text string, secrets ...string) {
	t.Helper()
	forms := secretForms(secrets...)
	for _, d := range decodedForms(text) {
		for _, f := range forms {
			if strings.Contains(d, f) {
				t.Errorf("%s holds a secret: %.40q…", name, f)
				return
			}
		}
	}
}

// setPath sets value at rest (.key and [*] steps, [*] appending a new
// item) below node, making maps and lists as needed.
func setPath(node any, rest string, value any) any {
	if rest == "" {
		return value
	}
	if after, ok := strings.CutPrefix(rest, "[*]"); ok {
		list, _ := node.([]any)
		return append(list, setPath(nil, after, value))
	}
	rest = strings.TrimPrefix(rest, ".")
	end := strings.IndexAny(rest, ".[")
	if end < 0 {
		end = len(rest)
	}
	m, _ := node.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	m[rest[:end]] = setPath(m[rest[:end]], rest[end:], value)
	return m
}

// configWith is a machine config, read leniently as the bundle reads a
// stored one, holding value at path (a field path of machineconfig.Fields,
// a [*] adding an item) among public values that must survive.
func configWith(t *testing.T, path, value string) *machineconfig.Config {
	t.Helper()
	doc := map[string]any{
		"apiVersion": machineconfig.APIVersion, "kind": machineconfig.Kind, "hostname": "keep-node",
		"network": map[string]any{"interfaces": []any{map[string]any{"name": "en*", "dhcp": true}}},
	}
	ign := map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"storage":  map[string]any{"directories": []any{map[string]any{"path": "/var/lib/keep"}}},
		"passwd":   map[string]any{"users": []any{map[string]any{"name": "keeper", "sshAuthorizedKeys": []any{keepSSHKey}}}},
		"systemd":  map[string]any{"units": []any{map[string]any{"name": "keep.service", "enabled": true}}},
	}
	switch rest, inIgnition := strings.CutPrefix(path, "$.ignition"); {
	case path == "$.ignition":
		doc["ignition"] = value
	case inIgnition:
		setPath(ign, rest, value)
	default:
		setPath(doc, strings.TrimPrefix(path, "$"), value)
	}
	if _, ok := doc["ignition"]; !ok {
		data, err := json.Marshal(ign)
		require.NoError(t, err)
		doc["ignition"] = string(data)
	}
	data, err := yaml.Marshal(doc)
	require.NoError(t, err)
	var c machineconfig.Config
	require.NoError(t, yaml.Unmarshal(data, &c))
	return &c
}

// bundleMember is the node/machine.yaml member a bundle makes of cfg,
// with the Redactor the bundle would make of cfg's secrets.
func bundleMember(t *testing.T, cfg *machineconfig.Config) (string, *Redactor) {
	t.Helper()
	opts, err := Options{}.withDefaults()
	require.NoError(t, err)
	red := NewRedactor(ConfigSecrets(cfg)...)
	c := newCollector(&host.Host{Root: t.TempDir()}, opts, nodeConfig{cfg: cfg}, red)
	defer c.close()
	m := c.run(context.Background(), c.machineConfig("node/machine.yaml"))
	require.Empty(t, m.file.Err)
	return string(m.data), red
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := zw.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// shape is a way a secret field holds secrets.
type shape struct {
	name  string
	value string
	// secrets are what must not show, in any form.
	secrets []string
	// logs are texts a log may show of the value, which the bundle's
	// Redactor must rid of every secret.
	logs []string
}

// shapesByClass are the values each class of secret field is tried with.
func shapesByClass(t *testing.T) map[machineconfig.FieldClass][]shape {
	key := testKey(t)
	b64 := base64.StdEncoding.EncodeToString
	remote := "https://" + url.UserPassword("admin", testPassword).String() + "@config.example.com/app.ign?X-Amz-Signature=" + testToken
	unit := "[Unit]\nDescription=Keep app\n[Service]\nEnvironment=API_TOKEN=" + testToken + " \"DB_PASSWORD=" + testPassword + "\"\nExecStart=/usr/bin/app\n"
	return map[machineconfig.FieldClass][]shape{
		machineconfig.SecretValue: {
			{"token", testToken, []string{testToken}, []string{"app[7]: " + testToken}},
			{"PEM key", key, []string{key}, []string{key, logLines("n", "app", key)}},
			{"password hash", testHash, []string{testHash}, []string{"shadow: keeper:" + testHash + ":19000::::::"}},
		},
		machineconfig.SecretURL: {
			{"data base64 PEM", "data:;base64," + b64([]byte(key)), []string{key}, []string{key, logLines("n", "cat", key)}},
			{"data base64 with media type", "data:text/plain;charset=utf-8;base64," + b64([]byte(testToken+"\n")), []string{testToken}, []string{"read " + testToken + "\n"}},
			{"data percent-encoded", "data:," + url.PathEscape("password="+testPassword+"\n"), []string{testPassword}, []string{"conf: password=" + testPassword + "\n"}},
			{"data percent-encoded PEM", "data:," + url.PathEscape(key), []string{key}, []string{key}},
			{"data gzip", "data:;base64," + b64(gzipped(t, key)), []string{key}, []string{key}},
			{"remote with credentials", remote, []string{testPassword, testToken}, []string{"fetching " + remote}},
		},
		machineconfig.SecretText: {
			{"unit", unit, []string{testToken, testPassword}, []string{unit, "app[7]: token " + testToken, "app[7]: password " + testPassword}},
		},
		machineconfig.IgnitionConfig: {
			{"not JSON", "passwd:\n  users:\n    - passwordHash: " + testHash + "\n", []string{testHash}, nil},
		},
	}
}

// TestRedactEverySecretField puts secrets of every shape its class may
// take into every secret field of the machine config (as
// machineconfig.Fields classifies them, Ignition's included), and into
// keys outside Ignition's spec, and makes the bundle's member of it: no
// form of a secret is in it, and logs showing the secret are redacted by
// the bundle's Redactor; the config's public values survive.
func TestRedactEverySecretField(t *testing.T) {
	shapes := shapesByClass(t)
	type row struct {
		path  string
		class machineconfig.FieldClass
	}
	var rows []row
	for _, f := range machineconfig.Fields() {
		if f.Class.IsSecret() || f.Class == machineconfig.IgnitionConfig {
			rows = append(rows, row{f.Path, f.Class})
		}
	}
	require.GreaterOrEqual(t, len(rows), 26)
	// Keys Ignition's spec does not have are secret too.
	for _, p := range []string{"$.ignition.passwd.users[*].password", "$.ignition.storage.files[*].contents.Source", "$.ignition.secrets"} {
		rows = append(rows, row{p, machineconfig.SecretValue})
	}
	for _, r := range rows {
		for _, s := range shapes[r.class] {
			t.Run(r.path+"/"+s.name, func(t *testing.T) {
				cfg := configWith(t, r.path, s.value)
				member, red := bundleMember(t, cfg)
				assertNoSecret(t, "node/machine.yaml", member, s.secrets...)
				assert.Contains(t, member, "[REDACTED sha256:")
				assert.Contains(t, member, "hostname: keep-node")
				if r.path != "$.ignition" {
					for _, keep := range []string{"/var/lib/keep", `"keeper"`, keepSSHKey, "keep.service", `"3.4.0"`} {
						assert.Contains(t, member, keep)
					}
				}
				for i, log := range s.logs {
					out, _ := red.Redact([]byte(log))
					assertNoSecret(t, fmt.Sprintf("log %d", i), string(out), s.secrets...)
				}
			})
		}
	}
}

// ignitionWithSecrets is an Ignition config that carries secrets in
// every encoding a data: URL has, in a password hash, a unit and a
// remote URL's credentials, and public values that must survive. It
// returns the config and its secrets.
func ignitionWithSecrets(t *testing.T) (string, []string) {
	t.Helper()
	key := testKey(t)
	b64 := base64.StdEncoding.EncodeToString
	doc := map[string]any{
		"ignition": map[string]any{"version": "3.4.0", "config": map[string]any{"merge": []any{map[string]any{
			"source":      "https://" + url.UserPassword("admin", testPassword).String() + "@config.example.com/base.ign",
			"httpHeaders": []any{map[string]any{"name": "Authorization", "value": "Bearer " + testToken + "-hdr"}},
		}}}},
		"passwd": map[string]any{"users": []any{map[string]any{
			"name": "operator", "passwordHash": testHash, "sshAuthorizedKeys": []any{keepSSHKey},
		}}},
		"storage": map[string]any{"files": []any{
			map[string]any{"path": "/etc/app/tls.key", "mode": 384, "contents": map[string]any{"source": "data:;base64," + b64([]byte(key))}},
			map[string]any{"path": "/etc/app/token", "contents": map[string]any{"source": "data:," + url.PathEscape(testToken+"-file\n")}},
			map[string]any{"path": "/etc/app/db.conf", "contents": map[string]any{
				"compression": "gzip", "source": "data:;base64," + b64(gzipped(t, "user=app\npassword="+testPassword+"-db\n")),
			}},
		}},
		"systemd": map[string]any{"units": []any{map[string]any{
			"name": "app.service", "enabled": true,
			"contents": "[Service]\nEnvironment=API_TOKEN=" + testToken + "-unit\nExecStart=/usr/bin/app\n",
		}}},
	}
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	return string(data), []string{key, testPassword, testToken, testHash}
}

// TestNoIgnitionSecretInBundle: a control plane whose config carries an
// Ignition config full of secrets, and whose journal shows them decoded,
// yields a bundle without any of them; node/machine.yaml keeps the
// Ignition config's public values and says what each secret was.
func TestNoIgnitionSecretInBundle(t *testing.T) {
	e := newEnv(t, "cp-1")
	ign, secrets := ignitionWithSecrets(t)
	stored := parseStored(t, e.cluster.configs["cp-1"])
	stored.Ignition = ign
	data, err := stored.Marshal()
	require.NoError(t, err)
	e.write(nodestate.ConfigFile.String(), string(data), 0o600)
	key := testKey(t)
	e.exec.set(journalCmd+"-b 0", response{out: logLines("cp-1", "app", key) +
		logLines("cp-1", "app", "token file: "+testToken+"-file") +
		logLines("cp-1", "app", "config: user=app\npassword="+testPassword+"-db") +
		logLines("cp-1", "app", "env API_TOKEN="+testToken+"-unit") +
		logLines("cp-1", "app", "auth: Bearer "+testToken+"-hdr")})

	_, a := e.collect(e.opts())
	for name, content := range a.files {
		assertNoSecret(t, name, content, secrets...)
	}
	m := a.files["node/machine.yaml"]
	for _, want := range []string{
		"/etc/app/tls.key", "/etc/app/db.conf", `"operator"`, keepSSHKey, "app.service", `"Authorization"`, `"gzip"`,
		", data: URL (base64) of 227 B: PEM EC PRIVATE KEY]",
		", data: URL (percent-encoded) of 34 B, one line of text]",
		", data: URL (base64, gzip) of 53 B, 2 lines of text]",
		", SHA-512-crypt password hash]",
		", 89 B, 3 lines: Service: Environment, ExecStart]",
		", https URL of config.example.com, with user info]",
		// The key file's marker is the one the journal's copy gets.
		strings.TrimSuffix(Marker(strings.TrimSpace(key)), "]") + ", data: URL",
	} {
		assert.Contains(t, m, want)
	}
	assert.Contains(t, a.files["journal/boot-0.log"], Marker(strings.TrimSpace(key)))
	var cfg machineconfig.Config
	require.NoError(t, yaml.Unmarshal([]byte(m), &cfg))
	assert.Equal(t, RedactConfig(parseStored(t, data)), &cfg, "the member is the redacted config")
}

// TestConfigSecretsOfIgnition: what the Redactor is told of an Ignition
// config's secrets, beyond the values its fields hold.
func TestConfigSecretsOfIgnition(t *testing.T) {
	ign, _ := ignitionWithSecrets(t)
	var got []string
	for _, v := range ConfigSecrets(&machineconfig.Config{Ignition: ign}) {
		got = append(got, strings.TrimSpace(v))
	}
	for _, want := range []string{
		testHash, "Bearer " + testToken + "-hdr", testPassword, // the merge URL's password
		testKey(t), testToken + "-file", "user=app\npassword=" + testPassword + "-db", testToken + "-unit",
		url.PathEscape(testToken + "-file\n"), // the payload as written
	} {
		assert.Contains(t, got, strings.TrimSpace(want))
	}
	assert.NotContains(t, got, "")
}

// TestEmbeddedIgnitionSecrets: the secrets of an Ignition config in the
// embedded config (the image's own) are known to the bundle too.
func TestEmbeddedIgnitionSecrets(t *testing.T) {
	e := newEnv(t, "w-1")
	ign, secrets := ignitionWithSecrets(t)
	embedded := machineconfig.Example()
	embedded.Ignition = ign
	data, err := embedded.Marshal()
	require.NoError(t, err)
	e.write(layout.EmbeddedConfig, string(data), 0o644)
	e.exec.set("dmesg", response{out: "[    1.0] app: token " + testToken + "-file\n[    1.1] " + testHash + "\n"})
	_, a := e.collect(e.opts())
	for name, content := range a.files {
		assertNoSecret(t, name, content, secrets...)
	}
}

// FuzzRedactConfig feeds Ignition configs (the seed corpus is in
// testdata/fuzz/FuzzRedactConfig) through the bundle's redaction of the
// machine config: RedactConfig leaves its argument alone; every secret
// left in what it returns is a marker; the member made of it holds no
// form of a secret the Redactor was told of.
func FuzzRedactConfig(f *testing.F) {
	key := testKey(f)
	f.Add(`{"storage": {"files": [{"path": "/k", "contents": {"source": "data:;base64,` + base64.StdEncoding.EncodeToString([]byte(key)) + `"}}]}}`)
	f.Add(`{"storage": {"files": [{"path": "/t", "contents": {"source": "data:text/plain,tok%2D7c1e0b9a4f2d6e83a5b1c9d7%0A"}}]}}`)
	f.Add(`{"ignition": {"proxy": {"httpsProxy": "http://u:p4ssw0rd-0123456789@proxy:3128"}}, "passwd": {"users": [{"name": "u", "passwordHash": "$y$j9T$salt$hash"}]}}`)
	f.Add(`{"systemd": {"units": [{"name": "a.service", "contents": "[Service]\nEnvironment=\"A=1 2\" B='x y' C=secret-value-0123456789\nSetCredential=tok:abcdefghijklmnopqrstu\n"}]}}`)
	f.Add(`{"unknown": {"deep": ["secret-value-0123456789"]}, "storage": {"files": [{"contents": {"source": "data:;base64,H4sI"}}]}}`)
	f.Fuzz(func(t *testing.T, ignition string) {
		cfg := &machineconfig.Config{Hostname: "n", Ignition: ignition}
		red := RedactConfig(cfg)
		if cfg.Ignition != ignition {
			t.Fatal("RedactConfig modified its argument")
		}
		for _, s := range red.Secrets() {
			if !strings.HasPrefix(s.Value, "[REDACTED sha256:") || !strings.HasSuffix(s.Value, "]") {
				t.Fatalf("%s holds %q after redaction", s.Path, s.Value)
			}
		}
		data, err := red.Marshal()
		if err != nil {
			t.Fatalf("marshal the redacted config: %v", err)
		}
		r := NewRedactor(ConfigSecrets(cfg)...)
		out, _ := r.Redact(data)
		for _, nd := range r.needles {
			if bytes.Contains(out, nd.text) {
				t.Fatalf("the member %q holds secret form %q", out, nd.text)
			}
		}
	})
}
