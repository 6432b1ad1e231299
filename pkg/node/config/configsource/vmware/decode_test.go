package vmware

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const config = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-1\n"

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func gz(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func gzb64(t testing.TB, data []byte) string {
	return base64.StdEncoding.EncodeToString(gz(t, data))
}

func TestDecode(t *testing.T) {
	wrapped := b64(config)
	wrapped = wrapped[:20] + "\n" + wrapped[20:40] + "\r\n " + wrapped[40:]
	bomb := gzb64(t, make([]byte, MaxConfigSize+1))
	tests := []struct {
		name, value, encoding string
		want                  string
		wantErr               error
	}{
		{name: "plain", value: config, want: config},
		{name: "plain, named", value: config, encoding: "plain", want: config},
		{name: "base64", value: b64(config), encoding: "base64", want: config},
		{name: "b64", value: b64(config), encoding: "b64", want: config},
		{name: "base64, any case, spaces", value: b64(config), encoding: " Base64 ", want: config},
		{name: "base64 unpadded", value: strings.TrimRight(b64("ab"), "="), encoding: "base64", want: "ab"},
		{name: "base64 URL-safe", value: base64.URLEncoding.EncodeToString([]byte{0xfb, 0xff}), encoding: "base64", want: "\xfb\xff"},
		{name: "base64 wrapped", value: wrapped, encoding: "base64", want: config},
		{name: "gzip+base64", value: gzb64(t, []byte(config)), encoding: "gzip+base64", want: config},
		{name: "gz+b64", value: gzb64(t, []byte(config)), encoding: "gz+b64", want: config},
		{name: "gzip, exactly the cap", value: gzb64(t, make([]byte, MaxConfigSize)), encoding: "gzip+base64", want: string(make([]byte, MaxConfigSize))},
		{name: "unknown encoding", value: config, encoding: "uuencode", wantErr: ErrUnknownEncoding},
		{name: "bad base64", value: "not*base64!", encoding: "base64", wantErr: ErrBadBase64},
		{name: "bad base64 under gzip", value: "not*base64!", encoding: "gzip+base64", wantErr: ErrBadBase64},
		{name: "not gzip", value: b64(config), encoding: "gzip+base64", wantErr: ErrBadGzip},
		{name: "truncated gzip", value: base64.StdEncoding.EncodeToString(gz(t, []byte(config))[:20]), encoding: "gzip+base64", wantErr: ErrBadGzip},
		{name: "gzip and trailing garbage", value: base64.StdEncoding.EncodeToString(append(gz(t, []byte(config)), "junk"...)), encoding: "gzip+base64", wantErr: ErrBadGzip},
		{name: "gzip bomb", value: bomb, encoding: "gzip+base64", wantErr: ErrTooLarge},
		{name: "plain too large", value: strings.Repeat("#", MaxConfigSize+1), wantErr: ErrTooLarge},
		{name: "base64 too large", value: b64(strings.Repeat("#", MaxConfigSize+1)), encoding: "base64", wantErr: ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.value, tt.encoding, MaxConfigSize)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
		})
	}
	assert.Less(t, len(bomb), 2<<10, "a megabyte of zeros compresses to a small value")
}

func FuzzDecode(f *testing.F) {
	f.Add(b64(config), "base64")
	f.Add(gzb64(f, []byte(config)), "gzip+base64")
	f.Add(config, "")
	f.Add("H4sIAAAAAAAA/w==", "gz+b64")
	f.Fuzz(func(t *testing.T, value, encoding string) {
		const limit = 4 << 10
		got, err := Decode(value, encoding, limit)
		if err != nil {
			if got != nil {
				t.Fatalf("Decode failed (%v) and returned %d bytes", err, len(got))
			}
			for _, sentinel := range []error{ErrBadBase64, ErrBadGzip, ErrTooLarge, ErrUnknownEncoding} {
				if errors.Is(err, sentinel) {
					return
				}
			}
			t.Fatalf("Decode error %v is none of the sentinels", err)
		}
		if len(got) > limit {
			t.Fatalf("Decode returned %d bytes, more than the cap %d", len(got), limit)
		}
	})
}
