package support

import (
	"bytes"
	"encoding/base64"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testKey is a throwaway P-256 key made for these tests only.
func testKey(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/key.pem")
	require.NoError(t, err)
	return string(b)
}

func TestMarker(t *testing.T) {
	m := Marker("0123456789abcdef0123")
	assert.Regexp(t, regexp.MustCompile(`^\[REDACTED sha256:[0-9a-f]{8}\]$`), m)
	assert.Equal(t, m, Marker("0123456789abcdef0123"))
	assert.NotEqual(t, m, Marker("0123456789abcdef0124"))
}

func TestRedact(t *testing.T) {
	key := testKey(t)
	lines := pemBody(key)
	const secret = "s3cr3t-value-0123456789"
	const urlSecret = "url-secret-0123456789??>" // its encodings differ in the last group
	mk := Marker(secret)
	keyMk := Marker(strings.TrimSpace(key))
	b64 := base64.StdEncoding.EncodeToString
	// shifted is the key inside a longer base64 text, two bytes in.
	shifted := b64(append([]byte("ab"), key...))
	foreign := newKey(t, "PRIVATE KEY")
	tests := []struct {
		name, in, want string
		n              int
	}{
		{"nothing", "plain text\n", "plain text\n", 0},
		{"value", "a " + secret + " b " + secret, "a " + mk + " b " + mk, 2},
		{"base64", "x=" + b64([]byte(secret)) + ";", "x=" + mk + ";", 1},
		{"base64url", base64.URLEncoding.EncodeToString([]byte(urlSecret)), Marker(urlSecret), 1},
		{"whole key", "k: " + key, "k: " + keyMk + "\n", 1},
		{"one line", "log: " + lines[1] + " end", "log: " + keyMk + " end", 1},
		{"prefixed lines", logLines("n", "u", key), "", -1},
		{"joined body", strings.Join(lines, ""), keyMk, 1},
		{"key base64", b64([]byte(key)), keyMk, 1},
		{"key base64 shifted", shifted, "", -1},
		{"foreign key", "a\n" + foreign + "b\n", "a\n" + Marker(strings.TrimSuffix(foreign, "\n")) + "\nb\n", 1},
		{"foreign key cut short", "a\n" + foreign[:80], "a\n" + Marker(foreign[:80]), 1},
		{"token", "join --token abcdef.0123456789abcdef now", "join --token " + Marker("abcdef.0123456789abcdef") + " now", 1},
		{"not a token", "xabcdef.0123456789abcdef mirror.gcr0123456789ab", "xabcdef.0123456789abcdef mirror.gcr0123456789ab", 0},
		{"kubeconfig yaml", "    client-key-data: QUJDREVGR0hJSktMTU5PUFFSU1RVVg==\n", "    client-key-data: " + Marker("QUJDREVGR0hJSktMTU5PUFFSU1RVVg==") + "\n", 1},
		{"kubeconfig json", `{"client-key-data":"QUJDREVGR0hJSktMTU5PUFFSU1RVVg=="}`, `{"client-key-data":"` + Marker("QUJDREVGR0hJSktMTU5PUFFSU1RVVg==") + `"}`, 1},
		{"short value ignored", "tiny", "tiny", 0},
	}
	require.NotEqual(t, base64.StdEncoding.EncodeToString([]byte(urlSecret)), base64.URLEncoding.EncodeToString([]byte(urlSecret)))
	r := NewRedactor(secret, key, "tiny", urlSecret)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n := r.Redact([]byte(tt.in))
			for _, nd := range needles(secret, key) {
				assert.NotContains(t, string(got), nd)
			}
			if tt.n < 0 { // only that nothing is left
				assert.Contains(t, string(got), "[REDACTED sha256:")
				return
			}
			assert.Equal(t, tt.want, string(got))
			assert.Equal(t, tt.n, n)
		})
	}
}

// A known key matched as a PEM block is named after the key, whatever
// prefixes its lines carry.
func TestRedactNamesKnownKeys(t *testing.T) {
	key := testKey(t)
	got, _ := NewRedactor(key).Redact([]byte(logLines("n", "u", key)))
	assert.Equal(t, "2026-01-02T03:00:00+0000 n u[812]: "+Marker(strings.TrimSpace(key))+"\n", string(got))
}

func TestRedactNested(t *testing.T) {
	outer := "outer-secret-0123456789-" + "inner-secret-abcdef"
	inner := "inner-secret-abcdef"
	got, n := NewRedactor(inner, outer).Redact([]byte("<" + outer + ">"))
	assert.Equal(t, "<"+Marker(outer)+">", string(got))
	assert.Equal(t, 1, n)
}

// A secret that every marker contains cannot be separated from any text
// that holds a secret: the content is withheld rather than leaked.
func TestRedactWithholds(t *testing.T) {
	const other = "another-secret-value-xyz"
	r := NewRedactor("[REDACTED sha256:", other)
	got, n := r.Redact([]byte("a " + other))
	assert.Empty(t, got)
	assert.Positive(t, n)
	got, n = r.Redact([]byte("nothing here"))
	assert.Equal(t, "nothing here", string(got))
	assert.Zero(t, n)
}

// A secret that only appears once the marker of another is in place (it
// straddles the marker's end) is caught in a later pass.
func TestRedactAcrossMarkers(t *testing.T) {
	const first = "first-secret-value-0001"
	straddle := Marker(first)[10:] + "tail-text"
	got, _ := NewRedactor(first, straddle).Redact([]byte(first + "tail-text"))
	assert.NotContains(t, string(got), straddle)
	assert.NotContains(t, string(got), first)
}

func TestConfigSecretsAndRedactConfig(t *testing.T) {
	c, err := testCluster()
	require.NoError(t, err)
	cfg := parseStored(t, c.configs["cp-1"])
	s := c.secrets
	assert.Equal(t, []string{s.Token(), s.BootstrapToken.Secret, s.CA.Key, s.FrontProxyCA.Key, s.EtcdCA.Key, s.ServiceAccount.Key, s.CertificateKey, s.SecretsEncryptionKey}, ConfigSecrets(cfg))

	before, err := cfg.Marshal()
	require.NoError(t, err)
	red := RedactConfig(cfg)
	after, err := cfg.Marshal()
	require.NoError(t, err)
	assert.Equal(t, before, after, "RedactConfig modified its argument")
	for _, v := range ConfigSecrets(red) {
		assert.Regexp(t, `^\[REDACTED sha256:[0-9a-f]{8}, [^\]]+\]$`, v)
	}
	assert.Equal(t, describedMarker(s.CA.Key, "227 B: PEM EC PRIVATE KEY"), red.Cluster.PKI.CAKey)
	assert.Equal(t, describedMarker(s.Token(), "bootstrap token, id "+s.BootstrapToken.ID), red.Cluster.Token)
	assert.Equal(t, describedMarker(s.CertificateKey, "64 hex digits"), red.Cluster.PKI.CertificateKey)
	assert.Equal(t, describedMarker(s.SecretsEncryptionKey, "44 B, one line of text"), red.Cluster.SecretsEncryptionKey)
	data, err := red.Marshal()
	require.NoError(t, err)
	for _, n := range needles(ConfigSecrets(cfg)...) {
		assert.NotContains(t, string(data), n)
	}
}

// A rotated control plane's retired keys are secrets too.
func TestRetiredKeysRedacted(t *testing.T) {
	c, err := testCluster()
	require.NoError(t, err)
	cfg := parseStored(t, c.configs["cp-1"])
	retired := "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	cfg.Cluster.RetiredSecretsEncryptionKeys = []string{retired}
	assert.Contains(t, ConfigSecrets(cfg), retired)
	red := RedactConfig(cfg)
	require.Len(t, red.Cluster.RetiredSecretsEncryptionKeys, 1)
	assert.Equal(t, describedMarker(retired, "44 B, one line of text"), red.Cluster.RetiredSecretsEncryptionKeys[0])
	assert.Equal(t, retired, cfg.Cluster.RetiredSecretsEncryptionKeys[0], "RedactConfig modified its argument")
}

func TestLastLines(t *testing.T) {
	for in, want := range map[string]string{"": "", "a": "a", "a\nb\nc\n": "b\nc\n", "a\nb\nc": "b\nc\n", "b\nc\n": "b\nc\n"} {
		assert.Equal(t, want, string(lastLines([]byte(in), 2)), "%q", in)
	}
}

func FuzzRedact(f *testing.F) {
	key := testKey(f)
	f.Add([]byte(logLines("n", "u", key)), "abcdef.0123456789abcdef")
	f.Add([]byte("client-key-data: "+base64.StdEncoding.EncodeToString([]byte(key))), "-----BEGIN PRIVATE KEY-----")
	f.Add([]byte("x[REDACTED sha256:00000000]y"), "REDACTED sha256:0000")
	f.Fuzz(func(t *testing.T, text []byte, secret string) {
		r := NewRedactor(secret, key)
		in := bytes.Clone(text)
		out, n := r.Redact(text)
		require.Equal(t, in, text, "Redact modified its input")
		for _, nd := range r.needles {
			if bytes.Contains(out, nd.text) {
				t.Fatalf("output %q holds secret form %q", out, nd.text)
			}
		}
		if n == 0 {
			require.Equal(t, text, out, "nothing redacted, yet the text changed")
		}
	})
}
