package strictyaml

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzUnmarshal feeds YAML documents (the seed corpus is in
// testdata/fuzz/FuzzUnmarshal) to Unmarshal: it never panics; it fails with
// Problems, each with a path, and leaves the target untouched; and what it
// accepts, yaml.v3 decodes to the same value.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(validDoc))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got testDoc
		err := Unmarshal(data, &got)
		if err != nil {
			checkProblems(t, err)
			_ = Problems{{Path: "$.x"}}.WithLines(data) // must not panic
			if !reflect.DeepEqual(got, testDoc{}) {
				t.Fatalf("target was modified despite %v: %+v", err, got)
			}
			return
		}
		var lenient testDoc
		if err := yaml.Unmarshal(data, &lenient); err != nil {
			t.Fatalf("Unmarshal accepted what yaml.v3 rejects: %v", err)
		}
		// Compared in YAML form: Extra may hold a NaN.
		a, errA := yaml.Marshal(&got)
		b, errB := yaml.Marshal(&lenient)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Fatalf("Unmarshal and yaml.v3 disagree (%v, %v):\n%s\n%s", errA, errB, a, b)
		}
	})
}

// checkProblems fails t unless err is a non-empty Problems whose every
// problem has a path and a message.
func checkProblems(t *testing.T, err error) {
	t.Helper()
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %T is not a Problems: %v", err, err)
	}
	if len(ps) == 0 {
		t.Fatalf("empty Problems returned as an error")
	}
	for _, p := range ps {
		if !strings.HasPrefix(p.Path, "$") || p.Message == "" || p.Line < 0 {
			t.Fatalf("problem without a path or message: %#v", p)
		}
	}
}
