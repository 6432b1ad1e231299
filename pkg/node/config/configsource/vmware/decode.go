package vmware

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
)

// Encodings of guestinfo.terrarium.config, as
// guestinfo.terrarium.config.encoding names them (cloud-init's names).
const (
	EncodingPlain      = ""
	EncodingBase64     = "base64"
	EncodingGzipBase64 = "gzip+base64"
)

// Decode decodes a value written with encoding: "" (or "plain") for the
// bytes as they are, "base64" (or "b64"), or "gzip+base64" (or
// "gz+b64"), names matched without regard to case. base64 may use the
// standard or URL-safe alphabet, padded or not, wrapped over lines or
// not. A result of more than limit bytes is refused, while gzip
// decompresses (a small value can expand to gigabytes).
func Decode(value, encoding string, limit int) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case EncodingPlain, "plain":
		if len(value) > limit {
			return nil, fmt.Errorf("%d bytes: %w (%d)", len(value), ErrTooLarge, limit)
		}
		return []byte(value), nil
	case EncodingBase64, "b64":
		return decodeBase64(value, limit)
	case EncodingGzipBase64, "gz+b64":
		compressed, err := decodeBase64(value, len(value))
		if err != nil {
			return nil, err
		}
		return gunzip(compressed, limit)
	}
	return nil, fmt.Errorf("%q: %w; use %q, %q or none", encoding, ErrUnknownEncoding, EncodingBase64, EncodingGzipBase64)
}

func decodeBase64(value string, limit int) ([]byte, error) {
	s := strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, value)
	s = strings.TrimRight(s, "=")
	if n := base64.RawStdEncoding.DecodedLen(len(s)); n > limit {
		return nil, fmt.Errorf("%d bytes once decoded: %w (%d)", n, ErrTooLarge, limit)
	}
	var err error
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		var b []byte
		if b, err = enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w (%w)", ErrBadBase64, err)
}

// gunzip decompresses data, refusing more than limit bytes of output.
func gunzip(data []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", ErrBadGzip, err)
	}
	defer zr.Close()
	b, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", ErrBadGzip, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("more than %d bytes once decompressed: %w", limit, ErrTooLarge)
	}
	return b, nil
}
