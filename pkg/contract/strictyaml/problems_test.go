package strictyaml

import (
	"errors"
	"testing"
)

func TestPath(t *testing.T) {
	tests := []struct {
		name string
		path Path
		want string
	}{
		{"zero is root", Path{}, "$"},
		{"root", Root(), "$"},
		{"fields and indexes", Root().Field("network").Field("interfaces").Index(0).Field("addresses").Index(1),
			"$.network.interfaces[0].addresses[1]"},
		{"quoted key", Root().Field("routes").Field("my route"), `$.routes["my route"]`},
		{"empty key", Root().Field(""), `$[""]`},
		{"index at root", Root().Index(3), "$[3]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.path.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPathIsImmutable(t *testing.T) {
	base := Root().Field("a")
	_ = base.Field("b")
	if got := base.String(); got != "$.a" {
		t.Errorf("base changed to %q", got)
	}
}

func TestProblems(t *testing.T) {
	var ps Problems
	if err := ps.Err(); err != nil {
		t.Fatalf("empty Problems.Err() = %v, want nil", err)
	}
	if err := ps.WithFile("m.yaml"); err != nil {
		t.Fatalf("empty Problems.WithFile() = %v, want nil", err)
	}
	ps.Addf(Root().Field("hostname"), "%q is not valid", "A")
	ps = append(ps, Problem{Path: "$.x", Line: 4, Message: "bad"})

	wantErr := "$.hostname: \"A\" is not valid\n$.x: bad (line 4)"
	if err := ps.Err(); err == nil || err.Error() != wantErr {
		t.Errorf("Err() = %v, want %q", err, wantErr)
	}
	err := ps.WithFile("machine.yaml")
	wantFile := "machine.yaml: $.hostname: \"A\" is not valid\nmachine.yaml: $.x: bad (line 4)"
	if err == nil || err.Error() != wantFile {
		t.Errorf("WithFile() = %v, want %q", err, wantFile)
	}
	var got Problems
	if !errors.As(err, &got) || len(got) != 2 {
		t.Errorf("errors.As(WithFile()) = %v, want the 2 problems", got)
	}
}

func TestProblemsWithLines(t *testing.T) {
	data := []byte("hostname: a\nnetwork:\n  interfaces:\n    - name: x\n      dns: [1, 2]\n")
	ps := Problems{
		{Path: "$.hostname"},
		{Path: "$.network.interfaces[0]"},
		{Path: "$.network.interfaces[0].dns[1]"},
		{Path: "$.admin"},
		{Path: "$.hostname", Line: 9},
	}
	got := ps.WithLines(data)
	want := []int{1, 4, 5, 0, 9}
	for i, p := range got {
		if p.Line != want[i] {
			t.Errorf("%s: line %d, want %d", p.Path, p.Line, want[i])
		}
	}
	if ps[0].Line != 0 {
		t.Error("WithLines modified its receiver")
	}
	if got := ps.WithLines([]byte("a: [")); got[0].Line != 0 {
		t.Errorf("unparsable data gave line %d", got[0].Line)
	}
}
