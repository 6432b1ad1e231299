package support

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// A redacted field of the machine config keeps what a support engineer
// needs to know of its value without the value: its size and what it is
// (which PEM blocks, a bootstrap token's public id, a password hash's
// algorithm, a data: URL's encoding and what it decodes to, a URL's
// scheme and host, a unit's sections and keys), after the hash that
// Marker gives the same secret everywhere else in the bundle.

const (
	// maxDescribedKeys caps the keys a unit's description lists.
	maxDescribedKeys = 32
	// maxTextSecret caps the decoded contents and unit texts given whole
	// to the Redactor: every line of a multi-line secret becomes a
	// needle, and key, token and password files are small. Longer
	// contents are looked for by the private keys and tokens in them.
	maxTextSecret = 16 << 10
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	// tokenShape is a whole bootstrap token.
	tokenShape = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	hexShape   = regexp.MustCompile(`^[0-9a-fA-F]{16,}$`)
	// mediaTypeShape is what of a data: URL's media type is shown.
	mediaTypeShape = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9.+-]{0,63}$`)
	// hostShape is what of a URL's host is shown.
	hostShape = regexp.MustCompile(`^[A-Za-z0-9.:\[\]-]{1,255}$`)
	// unitSection and unitKey are a systemd unit's section and key lines.
	unitSection = regexp.MustCompile(`^\[([A-Za-z0-9 _.-]{1,64})\]$`)
	unitKey     = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_]{0,63})\s*=`)
)

// pemTypes are the PEM block types a description names; any other is "a
// PEM block", as its type line is text the config's author chose.
var pemTypes = map[string]bool{
	"PRIVATE KEY": true, "RSA PRIVATE KEY": true, "EC PRIVATE KEY": true, "DSA PRIVATE KEY": true,
	"ENCRYPTED PRIVATE KEY": true, "OPENSSH PRIVATE KEY": true,
	"CERTIFICATE": true, "PUBLIC KEY": true, "RSA PUBLIC KEY": true, "CERTIFICATE REQUEST": true, "X509 CRL": true,
}

// cryptAlgorithms name crypt(5) password hashes by their prefix.
var cryptAlgorithms = []struct{ prefix, name string }{
	{"$y$", "yescrypt"}, {"$gy$", "gost-yescrypt"}, {"$7$", "scrypt"},
	{"$6$", "SHA-512-crypt"}, {"$5$", "SHA-256-crypt"}, {"$1$", "MD5-crypt"},
	{"$2a$", "bcrypt"}, {"$2b$", "bcrypt"}, {"$2y$", "bcrypt"}, {"$argon2", "argon2"},
}

// describedMarker is Marker(secret) followed by what the secret was:
// "[REDACTED sha256:1a2b3c4d, 227 B: PEM EC PRIVATE KEY]".
func describedMarker(secret, what string) string {
	m := Marker(strings.TrimSpace(secret))
	return m[:len(m)-1] + ", " + what + "]"
}

// redactField is what a secret of the machine config is replaced with.
func redactField(s machineconfig.Secret) string {
	switch {
	case s.Class == machineconfig.IgnitionConfig:
		return describedMarker(s.Value, size(len(s.Value))+" that is not an Ignition config (one JSON object)")
	case s.Field == "":
		return describedMarker(s.Value, "not a field of Ignition's spec: "+describeBytes([]byte(s.Value)))
	case s.Class == machineconfig.SecretURL:
		return describeURL(s.Value)
	case s.Class == machineconfig.SecretText:
		return describedMarker(s.Value, describeUnit(s.Value))
	}
	return describedMarker(s.Value, describeBytes([]byte(s.Value)))
}

// describeURL describes a URL by its scheme: a data: URL by its encoding
// and what it decodes to (and takes the hash of that, as the Redactor
// knows the decoded contents by it), any other by its host and whether it
// carries user info or a query.
func describeURL(v string) string {
	if d, ok := parseDataURL(v); ok {
		what := "data: URL ("
		if d.base64 {
			what += "base64"
		} else {
			what += "percent-encoded"
		}
		if d.mediaType != "" {
			what += ", " + d.mediaType
		}
		if d.gzip {
			what += ", gzip"
		}
		return describedMarker(string(d.data), what+") of "+describeBytes(d.data))
	}
	if scheme, _, _ := strings.Cut(v, ":"); strings.EqualFold(scheme, "data") {
		return describedMarker(v, size(len(v))+" data: URL that does not decode")
	}
	u, err := url.Parse(v)
	if err != nil || u.Scheme == "" {
		return describedMarker(v, size(len(v))+" that is not a URL")
	}
	what := u.Scheme + " URL"
	if hostShape.MatchString(u.Host) {
		what += " of " + u.Host
	}
	if u.User != nil {
		what += ", with user info"
	}
	if u.RawQuery != "" {
		what += ", with a query"
	}
	return describedMarker(v, what)
}

// describeBytes says what b is without saying what it holds.
func describeBytes(b []byte) string {
	n := size(len(b))
	t := strings.TrimSpace(string(b))
	switch {
	case len(b) == 0:
		return "empty"
	case bytes.Contains(b, []byte("-----BEGIN ")):
		if types := pemBlockTypes(b); len(types) > 0 {
			return n + ": PEM " + strings.Join(types, ", ")
		}
	case tokenShape.MatchString(t):
		return "bootstrap token, id " + t[:6]
	case strings.HasPrefix(t, "$"):
		for _, a := range cryptAlgorithms {
			if strings.HasPrefix(t, a.prefix) {
				return a.name + " password hash"
			}
		}
	case bytes.HasPrefix(b, gzipMagic):
		return n + " of gzip data"
	case hexShape.MatchString(t):
		return fmt.Sprintf("%d hex digits", len(t))
	}
	if !utf8.Valid(b) || strings.ContainsFunc(t, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' }) {
		return n + " of binary data"
	}
	if lines := strings.Count(t, "\n") + 1; lines > 1 {
		return fmt.Sprintf("%s, %d lines of text", n, lines)
	}
	return n + ", one line of text"
}

// pemBlockTypes names the PEM blocks in b, in order.
func pemBlockTypes(b []byte) []string {
	var out []string
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		if pemTypes[block.Type] {
			out = append(out, block.Type)
		} else {
			out = append(out, "block")
		}
	}
}

// describeUnit describes a systemd unit or drop-in by its lines, sections
// and the keys it sets: the names are systemd's, the values may be
// secret.
func describeUnit(text string) string {
	type section struct {
		name string
		keys []string
	}
	var sections []section
	lines, keys := 0, 0
	for line := range strings.Lines(text) {
		lines++
		line = strings.TrimSpace(line)
		if m := unitSection.FindStringSubmatch(line); m != nil {
			sections = append(sections, section{name: m[1]})
			continue
		}
		m := unitKey.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if keys++; keys > maxDescribedKeys {
			continue
		}
		if len(sections) == 0 {
			sections = append(sections, section{})
		}
		s := &sections[len(sections)-1]
		s.keys = append(s.keys, m[1])
	}
	parts := make([]string, len(sections))
	for i, s := range sections {
		parts[i] = strings.Join(s.keys, ", ")
		if s.name != "" {
			parts[i] = strings.TrimSpace(s.name + ": " + parts[i])
		}
	}
	out := fmt.Sprintf("%s, %d lines", size(len(text)), lines)
	if lines == 1 {
		out = size(len(text)) + ", 1 line"
	}
	if len(parts) > 0 {
		out += ": " + strings.Join(parts, "; ")
	}
	if keys > maxDescribedKeys {
		out += " …"
	}
	return out
}

// size is a byte count as people read it.
func size(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// dataURL is a data: URL (RFC 2397) taken apart.
type dataURL struct {
	// mediaType is its type/subtype, "" when it has none or an odd one.
	mediaType string
	base64    bool
	// payload is the data as written, after the comma.
	payload string
	// data is the data decoded, and decompressed when it was gzip (and
	// decompresses to at most maxSecretFile bytes).
	data []byte
	gzip bool
}

// parseDataURL takes a data: URL apart; ok is false when s is not one or
// its data does not decode. It is lenient where Ignition is strict
// (base64 without padding, or URL-safe, or percent-encoded), as it reads
// what a config holds in order to hide it.
func parseDataURL(s string) (d dataURL, ok bool) {
	scheme, rest, found := strings.Cut(s, ":")
	if !found || !strings.EqualFold(scheme, "data") {
		return d, false
	}
	header, payload, found := strings.Cut(rest, ",")
	if !found {
		return d, false
	}
	d.payload = payload
	params := strings.Split(header, ";")
	if n := len(params); n > 1 && strings.EqualFold(strings.TrimSpace(params[n-1]), "base64") {
		d.base64 = true
	}
	if mediaTypeShape.MatchString(params[0]) {
		d.mediaType = strings.ToLower(params[0])
	}
	var err error
	if d.base64 {
		d.data, err = decodeBase64(payload)
	} else {
		var text string
		text, err = url.PathUnescape(payload)
		d.data = []byte(text)
	}
	if err != nil {
		return d, false
	}
	if bytes.HasPrefix(d.data, gzipMagic) {
		if plain, err := gunzipCapped(d.data, maxSecretFile); err == nil {
			d.data, d.gzip = plain, true
		}
	}
	return d, true
}

// decodeBase64 decodes s in any of base64's alphabets, padded or not,
// ignoring white space, percent-encoded or not.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Join(strings.Fields(s), "")
	var err error
	for range 2 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			var b []byte
			if b, err = enc.DecodeString(s); err == nil {
				return b, nil
			}
		}
		if !strings.Contains(s, "%") {
			break
		}
		if s, err = url.PathUnescape(s); err != nil {
			return nil, err
		}
	}
	return nil, err
}

// gunzipCapped decompresses b, failing beyond limit bytes.
func gunzipCapped(b []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("decompresses to more than %d bytes", limit)
	}
	return out, nil
}

// urlSecrets are the parts of a URL that hide elsewhere: a data: URL's
// payload as written and its decoded contents (whole when short, else
// their keys and tokens), a remote URL's password and query.
func urlSecrets(v string) []string {
	if d, ok := parseDataURL(v); ok {
		return append([]string{d.payload}, contentSecrets(d.data)...)
	}
	u, err := url.Parse(v)
	if err != nil {
		return nil
	}
	var out []string
	if p, ok := u.User.Password(); ok {
		out = append(out, p)
	}
	if u.RawQuery != "" {
		out = append(out, u.RawQuery)
	}
	return out
}

// contentSecrets are the secrets of a file's or unit's contents: the
// private keys and tokens in it, and the contents whole when short.
func contentSecrets(b []byte) []string {
	out := textSecrets(b)
	if len(b) <= maxTextSecret {
		out = append(out, string(b))
	}
	return out
}

// unitSecrets are the secrets of a systemd unit's text: its contents, and
// the values it sets with Environment= and SetCredential=, which a
// service may log on their own.
func unitSecrets(text string) []string {
	out := contentSecrets([]byte(text))
	for line := range strings.Lines(text) {
		key, value, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch strings.TrimSpace(key) {
		case "Environment":
			for _, assignment := range unitWords(value) {
				if _, v, ok := strings.Cut(assignment, "="); ok {
					out = append(out, v)
				}
			}
		case "SetCredential", "SetCredentialEncrypted":
			if _, v, ok := strings.Cut(value, ":"); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// unitWords splits a unit's value into words as systemd does for
// Environment=: at white space, "double" or 'single' quotes grouping.
func unitWords(s string) []string {
	var out []string
	var w strings.Builder
	var quote rune
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case unicode.IsSpace(r):
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}
