package ignitionspec

import (
	"errors"
	"testing"
)

// FuzzParse feeds configs (the seed corpus is in testdata/fuzz/FuzzParse)
// to Parse: it never panics, fails only with its documented errors, and
// what it returns keeps to what Parse promises.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullConfig))
	f.Add([]byte(`{"ignition": {"version": "3.0.0"}, "storage": {"files": [{"path": "/etc/motd", "contents": {"source": "data:,hi"}}]}}`))
	f.Add([]byte(`{"ignition": {"version": "2.2.0"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		if !IsIgnition(data) {
			t.Fatalf("Parse took a config IsIgnition does not see")
		}
		total := 0
		for _, d := range c.Directories {
			checkPlanPath(t, d.Path)
		}
		for _, fl := range c.Files {
			checkPlanPath(t, fl.Path)
			if fl.HasContents != (fl.Contents != nil) {
				t.Fatalf("%s: HasContents %v with contents %v", fl.Path, fl.HasContents, fl.Contents != nil)
			}
			if len(fl.Contents) > maxFileSize {
				t.Fatalf("%s: %d bytes", fl.Path, len(fl.Contents))
			}
			total += len(fl.Contents)
		}
		if total > maxTotalSize {
			t.Fatalf("%d bytes of contents", total)
		}
		for _, l := range c.Links {
			checkPlanPath(t, l.Path)
		}
		for _, u := range c.Units {
			if !unitName.MatchString(u.Name) {
				t.Fatalf("unit name %q", u.Name)
			}
			for _, d := range u.Dropins {
				if !unitName.MatchString(d.Name) {
					t.Fatalf("drop-in name %q", d.Name)
				}
			}
		}
		for _, u := range c.Users {
			if !accountName.MatchString(u.Name) {
				t.Fatalf("user name %q", u.Name)
			}
		}
	})
}

func checkPlanPath(t *testing.T, p string) {
	t.Helper()
	if why := pathProblem(p); why != "" {
		t.Fatalf("Parse took %s, which %s", p, why)
	}
}
