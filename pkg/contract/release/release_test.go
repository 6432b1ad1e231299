package release

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sample() *Release {
	return &Release{
		Name:          "terrarium",
		Version:       "1.2.3",
		Suite:         "trixie",
		KernelVersion: "6.12.0-1-amd64",
		BuiltAt:       "2025-01-02T03:04:05Z",
		Faults:        []string{"health", "other"},
	}
}

func TestMarshalLoadRoundTrip(t *testing.T) {
	for name, r := range map[string]*Release{
		"with faults":    sample(),
		"without faults": {Name: "terrarium", Version: "0.1.0", Suite: "trixie", KernelVersion: "6.1", BuiltAt: "1970-01-01T00:00:00Z"},
		"zero":           {},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := r.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(data), "}\n") {
				t.Errorf("Marshal does not end with a newline: %q", data)
			}
			path := filepath.Join(t.TempDir(), "release.json")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
			}
		})
	}
}

func TestMarshalFormat(t *testing.T) {
	data, err := sample().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "name": "terrarium",
  "version": "1.2.3",
  "suite": "trixie",
  "kernelVersion": "6.12.0-1-amd64",
  "builtAt": "2025-01-02T03:04:05Z",
  "faults": [
    "health",
    "other"
  ]
}
`
	if string(data) != want {
		t.Errorf("Marshal:\n%s\nwant:\n%s", data, want)
	}

	// Faults is omitted when empty, so a normal build's release.json does
	// not mention faults at all.
	r := sample()
	r.Faults = nil
	data, err = r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["faults"]; ok {
		t.Errorf("faults present without faults: %s", data)
	}
	for _, k := range []string{"name", "version", "suite", "kernelVersion", "builtAt"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing: %s", k, data)
		}
	}
}

func TestHasFault(t *testing.T) {
	r := sample()
	for _, tc := range []struct {
		fault string
		want  bool
	}{
		{"health", true},
		{"other", true},
		{"Health", false},
		{"heal", false},
		{"", false},
	} {
		if got := r.HasFault(tc.fault); got != tc.want {
			t.Errorf("HasFault(%q) = %v, want %v", tc.fault, got, tc.want)
		}
	}
	if (&Release{}).HasFault("health") {
		t.Error("a release without faults has the health fault")
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want a not-exist error", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load(bad) = %v, want an error naming %s", err, bad)
	}
	// Unknown fields are tolerated: an older firstboot can read a newer
	// release.json.
	newer := filepath.Join(dir, "newer.json")
	if err := os.WriteFile(newer, []byte(`{"name":"t","version":"2","extra":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(newer)
	if err != nil || r.Version != "2" {
		t.Errorf("Load(newer) = %+v, %v", r, err)
	}
}
