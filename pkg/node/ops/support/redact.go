package support

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
)

// MinSecretLen is the shortest value a Redactor looks for. Shorter values
// would match innocent text, and none of a node's secrets is that short
// (a bootstrap token's secret half, the shortest, has 16 characters).
const MinSecretLen = 16

const (
	// maxPasses bounds how often Redact looks again after replacing: a
	// second pass is needed only when a secret shares characters with a
	// marker, which real secrets do not.
	maxPasses = 4
	// maxPEMSpan is how far after a BEGIN line a private key's END line is
	// looked for; an unterminated block (a log cut short) is redacted
	// this far.
	maxPEMSpan = 16 << 10
)

var (
	// pemBegin and pemEnd frame any PEM private key: PKCS#1, PKCS#8, SEC1,
	// OpenSSH and encrypted ones.
	pemBegin = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`)
	pemEnd   = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY-----`)
	// bootstrapToken is a kubeadm bootstrap token, id.secret.
	bootstrapToken = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)
	// kubeconfigKey is a kubeconfig's embedded client key (base64 of a
	// PEM key), in YAML or JSON; its first group is the value.
	kubeconfigKey = regexp.MustCompile(`client-key-data"?:\s*"?([A-Za-z0-9+/=]{16,})`)
)

// Marker is what a secret is replaced with: "[REDACTED sha256:<first 8
// hex digits of its SHA-256>]". The hash lets a reader tell two secrets
// apart, and match a marker with a secret they hold, without revealing it.
func Marker(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "[REDACTED sha256:" + hex.EncodeToString(sum[:4]) + "]"
}

// Redactor replaces secrets in text with their Marker. It looks for the
// secrets it was given in every form they are likely to take in a log or
// a file: as they are, each line of a multi-line value (so a PEM key cut
// into a log line by line is caught), the joined body of a PEM block, and
// base64 encodings at any alignment (so a key inside a base64-encoded
// kubeconfig or config is caught). It also replaces, without being told,
// every PEM private key block, every string shaped like a bootstrap token,
// and kubeconfig client keys. A Redactor is safe for concurrent use.
type Redactor struct {
	needles []needle // longest first
}

// needle is one form of a secret and the marker it is replaced with.
type needle struct {
	text   []byte
	marker []byte
}

// span is a stretch of text to replace with marker; known says it is one
// of the secrets the Redactor was given, not a pattern's match.
type span struct {
	start, end int
	marker     []byte
	known      bool
}

// NewRedactor returns a Redactor for secrets. Values shorter than
// MinSecretLen (after trimming white space) are ignored, and so are lines
// of a multi-line value that are shorter or are a PEM BEGIN or END line.
func NewRedactor(secrets ...string) *Redactor {
	seen := map[string]bool{}
	var ns []needle
	for _, s := range secrets {
		marker := []byte(Marker(strings.TrimSpace(s)))
		for _, form := range forms(s) {
			if len(form) < MinSecretLen || seen[form] {
				continue
			}
			seen[form] = true
			ns = append(ns, needle{text: []byte(form), marker: marker})
		}
	}
	slices.SortFunc(ns, func(a, b needle) int {
		if len(a.text) != len(b.text) {
			return len(b.text) - len(a.text)
		}
		return bytes.Compare(a.text, b.text)
	})
	return &Redactor{needles: ns}
}

// forms lists the shapes secret s may take in text.
func forms(s string) []string {
	trimmed := strings.TrimSpace(s)
	out := []string{trimmed}
	var body strings.Builder
	for line := range strings.Lines(trimmed) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "-----") {
			continue
		}
		out = append(out, line)
		if !strings.Contains(line, ":") { // PEM headers are not body
			body.WriteString(line)
		}
	}
	if strings.Contains(trimmed, "-----BEGIN") {
		out = append(out, body.String())
	}
	for _, v := range []string{trimmed, s} {
		out = append(out,
			base64.StdEncoding.EncodeToString([]byte(v)),
			base64.URLEncoding.EncodeToString([]byte(v)))
		out = append(out, base64Cores([]byte(v))...)
	}
	return out
}

// base64Cores are the parts of the standard base64 encoding of b that do
// not depend on what surrounds b, for each of the three alignments b can
// have inside a longer encoded text.
func base64Cores(b []byte) []string {
	var out []string
	for k := range 3 {
		src := append(make([]byte, k), b...)
		enc := base64.StdEncoding.EncodeToString(src)
		start, end := 0, 4*(len(src)/3)
		if k > 0 {
			start = 4 // the first group mixes in what precedes b
		}
		if end-start >= MinSecretLen {
			out = append(out, enc[start:end])
		}
	}
	return out
}

// Redact returns data with every secret replaced, and how many stretches
// of it were replaced. It may return data itself when there is nothing to
// replace. In the pathological case that the secrets cannot be separated
// from the text (a secret that keeps reappearing around the markers), the
// result is empty: Redact never returns a secret it was given.
func (r *Redactor) Redact(data []byte) ([]byte, int) {
	total := 0
	for range maxPasses {
		spans := r.find(data)
		if len(spans) == 0 {
			return data, total
		}
		data = replace(data, spans)
		total += len(spans)
	}
	if len(r.find(data)) > 0 {
		return nil, total + 1
	}
	return data, total
}

// find lists the stretches of text to replace, sorted and merged.
func (r *Redactor) find(text []byte) []span {
	var spans []span
	for _, n := range r.needles {
		spans = appendMatches(spans, text, n)
	}
	spans = appendPEMBlocks(spans, text)
	for _, loc := range bootstrapToken.FindAllIndex(text, -1) {
		spans = append(spans, span{loc[0], loc[1], []byte(Marker(string(text[loc[0]:loc[1]]))), false})
	}
	if bytes.Contains(text, []byte("client-key-data")) {
		for _, loc := range kubeconfigKey.FindAllSubmatchIndex(text, -1) {
			spans = append(spans, span{loc[2], loc[3], []byte(Marker(string(text[loc[2]:loc[3]]))), false})
		}
	}
	return merge(spans)
}

// appendMatches adds every occurrence of n in text, overlapping ones
// joined.
func appendMatches(spans []span, text []byte, n needle) []span {
	first := len(spans)
	for at := 0; ; {
		i := bytes.Index(text[at:], n.text)
		if i < 0 {
			return spans
		}
		start, end := at+i, at+i+len(n.text)
		if last := len(spans) - 1; last >= first && start <= spans[last].end {
			spans[last].end = end
		} else {
			spans = append(spans, span{start, end, n.marker, true})
		}
		at = start + 1
	}
}

// appendPEMBlocks adds every PEM private key block, from its BEGIN line
// through its END line, or through maxPEMSpan when it has none.
func appendPEMBlocks(spans []span, text []byte) []span {
	if !bytes.Contains(text, []byte("PRIVATE KEY-----")) {
		return spans
	}
	for _, loc := range pemBegin.FindAllIndex(text, -1) {
		end := min(len(text), loc[1]+maxPEMSpan)
		if e := pemEnd.FindIndex(text[loc[1]:end]); e != nil {
			end = loc[1] + e[1]
		}
		spans = append(spans, span{loc[0], end, []byte(Marker(string(text[loc[0]:end]))), false})
	}
	return spans
}

// merge sorts spans and joins overlapping ones. A joined span takes the
// marker of the first known secret in it, so that a PEM block matched as
// a pattern is named after the key it holds, or else the marker of the
// span that starts first (the longest, on a tie).
func merge(spans []span) []span {
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b span) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return b.end - a.end
	})
	out := spans[:1]
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if s.start < last.end {
			last.end = max(last.end, s.end)
			if s.known && !last.known {
				last.marker, last.known = s.marker, true
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// replace returns text with each span replaced by its marker.
func replace(text []byte, spans []span) []byte {
	var b bytes.Buffer
	b.Grow(len(text))
	at := 0
	for _, s := range spans {
		b.Write(text[at:s.start])
		b.Write(s.marker)
		at = s.end
	}
	b.Write(text[at:])
	return b.Bytes()
}
