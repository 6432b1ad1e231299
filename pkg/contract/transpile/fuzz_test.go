package transpile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// FuzzTranslate feeds any file (the seeds are testdata's real configs and
// testdata/fuzz/FuzzTranslate) to Translate: it never panics, even where
// a translator would; its errors are Problems of the documented kinds,
// each naming the file at a line the file has; what it accepts is of the
// kind Detect tells, Ignition passes through unchanged, and the result is
// Ignition 3 that Terrarium's Ignition path takes again.
func FuzzTranslate(f *testing.F) {
	for _, name := range []string{"fcos.bu", "flatcar.bu", "flatcar.clc.yaml", "fcos.ign"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.cfg"
		r, err := Translate(name, data)
		if err != nil {
			checkProblems(t, name, data, err)
			return
		}
		kind := Detect(data)
		if kind == KindUnknown || r.Kind != kind {
			t.Fatalf("took a config as %v, which Detect tells as %v", r.Kind, kind)
		}
		if kind == KindIgnition && !bytes.Equal(r.Ignition, trimBOM(data)) {
			t.Fatalf("Ignition did not pass through unchanged")
		}
		if _, err := ignitionspec.Parse(r.Ignition); err != nil {
			t.Fatalf("the result is not taken by the Ignition path: %v", err)
		}
	})
}

func checkProblems(t *testing.T, name string, data []byte, err error) {
	t.Helper()
	var ps Problems
	if !errors.As(err, &ps) || len(ps) == 0 {
		t.Fatalf("not Problems: %T %v", err, err)
	}
	lines := lineCount(data)
	for _, p := range ps {
		if p.File != name {
			t.Fatalf("a problem of another file: %v", p)
		}
		if p.Line < 0 || p.Line > lines || p.Column < 0 {
			t.Fatalf("at line %d col %d of a file of %d lines: %v", p.Line, p.Column, lines, p)
		}
		known := false
		for _, k := range []error{ErrUnknownFormat, ErrInvalid, ignitionspec.ErrUnsupported, ignitionspec.ErrVersion, ignitionspec.ErrMalformed} {
			known = known || errors.Is(p.Err, k)
		}
		if !known {
			t.Fatalf("undocumented kind: %v", p)
		}
	}
}
