package support

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

func TestDescribeBytes(t *testing.T) {
	key := testKey(t)
	cert := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	tests := []struct{ name, in, want string }{
		{"empty", "", "empty"},
		{"PEM key", key, "227 B: PEM EC PRIVATE KEY"},
		{"PEM chain", cert + key, "286 B: PEM CERTIFICATE, EC PRIVATE KEY"},
		{"PEM of an odd type", "-----BEGIN hunter2hunter2-----\nMIIB\n-----END hunter2hunter2-----\n", "65 B: PEM block"},
		{"not PEM after all", "-----BEGIN nothing", "18 B, one line of text"},
		{"token", "abcdef.0123456789abcdef", "bootstrap token, id abcdef"},
		{"yescrypt", "$y$j9T$salt$hash", "yescrypt password hash"},
		{"bcrypt", "$2b$12$abcdefghijklmnopqrstuv", "bcrypt password hash"},
		{"other dollar", "$HOME/x", "7 B, one line of text"},
		{"hex", strings.Repeat("ab", 32), "64 hex digits"},
		{"gzip", "\x1f\x8b\x08\x00rest", "8 B of gzip data"},
		{"binary", "\x00\x01\x02", "3 B of binary data"},
		{"not UTF-8", "\xff\xfe", "2 B of binary data"},
		{"lines", "a=1\nb=2\n", "8 B, 2 lines of text"},
		{"large", strings.Repeat("x", 3<<10), "3.0 KiB, one line of text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, describeBytes([]byte(tt.in)))
		})
	}
}

func TestDescribeURL(t *testing.T) {
	key := testKey(t)
	b64 := base64.StdEncoding.EncodeToString
	keyMarker := strings.TrimSuffix(Marker(strings.TrimSpace(key)), "]")
	tests := []struct{ name, in, want string }{
		{"base64", "data:;base64," + b64([]byte(key)), keyMarker + ", data: URL (base64) of 227 B: PEM EC PRIVATE KEY]"},
		{"media type", "data:application/x-pem-file;base64," + b64([]byte(key)), keyMarker + ", data: URL (base64, application/x-pem-file) of 227 B: PEM EC PRIVATE KEY]"},
		{"gzip", "data:;base64," + b64(gzipped(t, key)), keyMarker + ", data: URL (base64, gzip) of 227 B: PEM EC PRIVATE KEY]"},
		{"percent-encoded", "data:," + strings.ReplaceAll(key, "\n", "%0A"), keyMarker + ", data: URL (percent-encoded) of 227 B: PEM EC PRIVATE KEY]"},
		{"empty", "data:,", strings.TrimSuffix(Marker(""), "]") + ", data: URL (percent-encoded) of empty]"},
		{"bad base64", "data:;base64,%%%", strings.TrimSuffix(Marker("data:;base64,%%%"), "]") + ", 16 B data: URL that does not decode]"},
		{"remote", "https://u:p@example.com:8443/x?sig=1", strings.TrimSuffix(Marker("https://u:p@example.com:8443/x?sig=1"), "]") + ", https URL of example.com:8443, with user info, with a query]"},
		{"not a URL", "just text", strings.TrimSuffix(Marker("just text"), "]") + ", 9 B that is not a URL]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, describeURL(tt.in))
		})
	}
}

func TestDescribeUnit(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"unit", "[Unit]\nDescription=A\nAfter=b.service\n\n[Service]\nEnvironment=T=x\nExecStart=/bin/a \\\n  --token=x\n[Install]\n", "105 B, 9 lines: Unit: Description, After; Service: Environment, ExecStart; Install:"},
		{"keys before a section", "A=1\n[S]\nB=2", "11 B, 3 lines: A; S: B"},
		{"nothing", "# comment\n", "10 B, 1 line"},
		{"many keys", strings.Repeat("K=v\n", maxDescribedKeys+2), "136 B, 34 lines: " + strings.TrimSuffix(strings.Repeat("K, ", maxDescribedKeys), ", ") + " …"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, describeUnit(tt.in))
		})
	}
}

func TestRedactField(t *testing.T) {
	for _, tt := range []struct {
		s    machineconfig.Secret
		want string
	}{
		{machineconfig.Secret{Field: "$.ignition", Class: machineconfig.IgnitionConfig, Value: "{x"}, "2 B that is not an Ignition config (one JSON object)"},
		{machineconfig.Secret{Class: machineconfig.SecretValue, Value: `{"a":1}`}, "not a field of Ignition's spec: 7 B, one line of text"},
		{machineconfig.Secret{Field: "$.cluster.token", Class: machineconfig.SecretValue, Value: "abcdef.0123456789abcdef"}, "bootstrap token, id abcdef"},
		{machineconfig.Secret{Field: "$.x", Class: machineconfig.SecretText, Value: "[Service]\nUser=a\n"}, "17 B, 2 lines: Service: User"},
	} {
		assert.Equal(t, describedMarker(tt.s.Value, tt.want), redactField(tt.s), tt.s.Value)
	}
}

func TestParseDataURL(t *testing.T) {
	tests := []struct {
		name, in string
		want     dataURL
		ok       bool
	}{
		{"plain", "data:,a%20b", dataURL{payload: "a%20b", data: []byte("a b")}, true},
		{"upper-case scheme", "DATA:,x", dataURL{payload: "x", data: []byte("x")}, true},
		{"base64", "data:text/plain;charset=utf-8;base64,aGk=", dataURL{mediaType: "text/plain", base64: true, payload: "aGk=", data: []byte("hi")}, true},
		{"base64 unpadded", "data:;base64,aGk", dataURL{base64: true, payload: "aGk", data: []byte("hi")}, true},
		{"base64 URL-safe", "data:;base64,-_8=", dataURL{base64: true, payload: "-_8=", data: []byte{0xfb, 0xff}}, true},
		{"base64 percent-encoded", "data:;base64,aGk%3D", dataURL{base64: true, payload: "aGk%3D", data: []byte("hi")}, true},
		{"base64 with line breaks", "data:;base64,aG\nk=", dataURL{base64: true, payload: "aG\nk=", data: []byte("hi")}, true},
		{"odd media type", "data:a b/c,x", dataURL{payload: "x", data: []byte("x")}, true},
		{"comma in data", "data:,a,b", dataURL{payload: "a,b", data: []byte("a,b")}, true},
		{"no comma", "data:text/plain", dataURL{}, false},
		{"bad escape", "data:,%zz", dataURL{payload: "%zz"}, false},
		{"bad base64", "data:;base64,!!!!", dataURL{base64: true, payload: "!!!!"}, false},
		{"not data", "https://x/,y", dataURL{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseDataURL(tt.in)
			assert.Equal(t, tt.ok, ok)
			if tt.ok {
				assert.Equal(t, tt.want, got)
			}
		})
	}
}

func TestParseDataURLGzip(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	got, ok := parseDataURL("data:;base64," + b64(gzipped(t, "hello")))
	require.True(t, ok)
	assert.True(t, got.gzip)
	assert.Equal(t, "hello", string(got.data))

	// Too large decompressed, or corrupt: the compressed bytes.
	big := gzipped(t, strings.Repeat("a", maxSecretFile+1))
	got, ok = parseDataURL("data:;base64," + b64(big))
	require.True(t, ok)
	assert.False(t, got.gzip)
	assert.Equal(t, big, got.data)
	got, ok = parseDataURL("data:;base64," + b64([]byte("\x1f\x8bnot gzip")))
	require.True(t, ok)
	assert.False(t, got.gzip)
}

func TestUnitSecrets(t *testing.T) {
	unit := "[Service]\nEnvironment=\"A=one two\" B='three four' C=five-value-0123456789\n" +
		"Environment=D=six\nSetCredential=db:seven-value-0123456789\nExecStart=/bin/app\n"
	got := unitSecrets(unit)
	assert.Equal(t, []string{unit, "one two", "three four", "five-value-0123456789", "six", "seven-value-0123456789"}, got)
	assert.Equal(t, []string{"a", "b c", "d=e f", ""}, unitWords(` a "b c" d='e f' ""`))
}

func TestURLSecrets(t *testing.T) {
	assert.Equal(t, []string{"s3cret", "sig=abc&x=1"}, urlSecrets("https://user:s3cret@h/p?sig=abc&x=1"))
	assert.Empty(t, urlSecrets("https://h/p"))
	assert.Equal(t, []string{"a%20b", "a b"}, urlSecrets("data:,a%20b"))
	long := strings.Repeat("line of a long file\n", maxTextSecret/20+1)
	assert.Equal(t, []string{strings.ReplaceAll(long, "\n", "%0A")}, urlSecrets("data:,"+strings.ReplaceAll(long, "\n", "%0A")),
		"long contents are looked for by their keys and tokens only")
}

func TestSize(t *testing.T) {
	for n, want := range map[int]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 3 << 20: "3.0 MiB"} {
		assert.Equal(t, want, size(n))
	}
}
