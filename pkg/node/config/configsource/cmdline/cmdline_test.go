package cmdline

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// FuzzParse feeds kernel command lines (the seed corpus is in
// testdata/fuzz/FuzzParse) to Parse: it never panics; it reports
// ErrAbsent exactly when the line has no terrarium.config=, and names the
// file in its other errors; and what it finds, encoded again, is found
// again unchanged.
func FuzzParse(f *testing.F) {
	const path = "/proc/cmdline"
	f.Add("console=ttyS0 " + Key + "=" + base64.StdEncoding.EncodeToString([]byte("hostname: a\n")))
	f.Fuzz(func(t *testing.T, line string) {
		found, err := Parse(line, path)
		absent := !hasField(line, Key+"=")
		if err != nil {
			if found != nil {
				t.Fatalf("Parse failed (%v) but returned a config", err)
			}
			if errors.Is(err, configsource.ErrAbsent) != absent {
				t.Fatalf("ErrAbsent is %v for a line with%s %s=: %v", !absent, map[bool]string{true: "out", false: ""}[absent], Key, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name %s: %v", path, err)
			}
			return
		}
		if absent {
			t.Fatalf("found a config in a line without %s=", Key)
		}
		again := Key + "=" + base64.StdEncoding.EncodeToString(found.Config)
		if len(found.Signature) > 0 {
			again += " " + SignatureKey + "=" + base64.URLEncoding.EncodeToString(found.Signature)
		}
		refound, err := Parse(again, path)
		if err != nil {
			t.Fatalf("Parse of the re-encoded line %q: %v", again, err)
		}
		if !bytes.Equal(refound.Config, found.Config) || !bytes.Equal(refound.Signature, found.Signature) {
			t.Fatalf("round trip changed the config or signature: %+v, want %+v", refound, found)
		}
	})
}

// hasField reports whether a whitespace-separated field of line starts
// with prefix.
func hasField(line, prefix string) bool {
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}
