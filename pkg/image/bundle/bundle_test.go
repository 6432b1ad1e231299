package bundle

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

func TestParseErrors(t *testing.T) {
	for _, name := range []string{"invalid", "unknown-fields", "no-images", "empty", "bad-lock", "truncated-lock"} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(filepath.Join("testdata", "parse", name+".yaml"))
			if err == nil {
				t.Fatal("Parse succeeded, want problems")
			}
			var problems strictyaml.Problems
			if !errors.As(err, &problems) {
				t.Errorf("error %T does not unwrap to strictyaml.Problems", err)
			}
			golden(t, filepath.Join("parse", name+".golden"), []byte(err.Error()+"\n"))
		})
	}
}

func TestParseValid(t *testing.T) {
	b, err := Parse(filepath.Join("testdata", "parse", "valid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{DefaultPlatform}; !reflect.DeepEqual(b.Platforms, want) {
		t.Errorf("Platforms = %q, want the default %q", b.Platforms, want)
	}
	abs, _ := filepath.Abs(filepath.Join("testdata", "parse"))
	if b.Dir() != abs {
		t.Errorf("Dir = %q, want %q", b.Dir(), abs)
	}
	if got, want := b.Abs(b.Images[1].Source.Build.Go), filepath.Join(abs, "testimages", "hello"); got != want {
		t.Errorf("Abs = %q, want %q", got, want)
	}
	kinds := make([]string, len(b.Images))
	for i, img := range b.Images {
		kinds[i] = strings.Join(img.Source.kinds(), ",")
	}
	if want := []string{"registry", "build", "layout", "tarball"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("source kinds = %q, want %q", kinds, want)
	}
}

func TestParseTestApps(t *testing.T) {
	b, err := Parse(filepath.Join("..", "..", "..", "bundles", "test-apps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"docker.io/library/hello:1.0":   "./testimages/hello",
		"ghcr.io/terrarium-os/echo:1.0": "./testimages/echo",
		"quay.io/terrarium/sleeper:1.0": "./testimages/sleeper",
	}
	if len(b.Images) != len(want) {
		t.Fatalf("%d images, want %d", len(b.Images), len(want))
	}
	for _, img := range b.Images {
		if bs := img.Source.Build; bs == nil || bs.Go != want[img.Name] {
			t.Errorf("image %s: build source %+v, want go: %s", img.Name, bs, want[img.Name])
		}
	}
}

func TestCheckImageName(t *testing.T) {
	tests := []struct {
		name string
		want string // fragment of the message; "" for valid
	}{
		{"registry.k8s.io/pause:3.10", ""},
		{"docker.io/library/hello:1.0", ""},
		{"localhost:5000/x:1", ""},
		{"localhost/x:1", ""},
		{"ghcr.io/a/b/c:v1.2", ""},
		{"hello:1.0", "names no registry host"},
		{"library/hello:1.0", "names no registry host"},
		{"docker.io/hello:1.0", "docker.io/library/hello:1.0"},
		{"index.docker.io/library/hello:1.0", "as docker.io/library/hello:1.0"},
		{"registry.k8s.io/pause", "has no tag"},
		{"registry.k8s.io/Pause:1", "not a valid image reference"},
		{"ghcr.io/x@sha256:" + strings.Repeat("a", 64), "is a digest reference"},
		{"", "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkImageName(tt.name)
			if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
				t.Errorf("checkImageName(%q) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestCheckPlatform(t *testing.T) {
	tests := []struct {
		platform string
		valid    bool
	}{
		{"linux/amd64", true},
		{"linux/arm64", true},
		{"linux/arm64/v8", true},
		{"linux/arm/v7", true},
		{"linux/riscv64", true},
		{"linux", false},
		{"linux/amd64/v9", false},
		{"linux/arm/v9", false},
		{"linux/amd65", false},
		{"windows/amd64", false},
		{"linux/amd64/v2/x", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.platform, func(t *testing.T) {
			if msg := checkPlatform(tt.platform); (msg == "") != tt.valid {
				t.Errorf("checkPlatform(%q) = %q, want valid=%v", tt.platform, msg, tt.valid)
			}
		})
	}
}
