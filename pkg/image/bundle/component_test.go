package bundle

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// helloComponent is pkg/gobuild's test component.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func helloComponent(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../gobuild/testdata/hello")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestComponentSource(t *testing.T) {
	c, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := writeBundle(t, t.TempDir(), "images:\n  - name: registry.example/x/hello:1\n    source:\n      build:\n        component: "+
		helloComponent(t)+"\n        programs: [hello]\n")
	opts := []Option{WithCacheDir(t.TempDir()), WithArtifactCache(c), WithEpoch(epoch)}
	first := resolveOne(t, b, opts...)
	if err := validate.Image(first.Image); err != nil {
		t.Fatalf("validate: %v", err)
	}
	files := layerFiles(t, first.Image)
	for _, f := range []string{"usr/local/bin/hello", "etc/passwd", "usr/local/bin/"} {
		if files[f] == nil {
			t.Errorf("image lacks %s (it has %v)", f, keys(files))
		}
	}
	cfg, err := first.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/usr/local/bin/hello" {
		t.Errorf("entrypoint %q", got)
	}
	// From an empty artifact cache and bundle cache, the same digest.
	c2, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	again := resolveOne(t, b, WithCacheDir(t.TempDir()), WithArtifactCache(c2), WithEpoch(epoch))
	if again.Digest != first.Digest {
		t.Fatalf("rebuild from empty caches gave %s, first build %s", again.Digest, first.Digest)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A bundle that builds its images can name where a connected host would
// pull them instead; WithPreferredSource picks that, pinned.
func TestRegistryAlternative(t *testing.T) {
	srv, _, _ := testRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	c, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts := []Option{WithCacheDir(t.TempDir()), WithArtifactCache(c), WithEpoch(epoch)}
	build := "    source:\n      build:\n        component: " + helloComponent(t) + "\n        programs: [hello]\n"
	built := resolveOne(t, writeBundle(t, t.TempDir(), "images:\n  - name: registry.example/x/hello:1\n"+build), opts...)
	ref, err := name.ParseReference(host + "/x/hello:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, built.Image); err != nil {
		t.Fatal(err)
	}
	withAlt := func(digest string) *Bundle {
		body := "images:\n  - name: registry.example/x/hello:1\n" + build +
			"    alternatives:\n      - registry: {ref: \"" + host + "/x/hello:1\"}\n"
		if digest != "" {
			body += "        digest: " + digest + "\n"
		}
		return writeBundle(t, t.TempDir(), body)
	}
	pulled := resolveOne(t, withAlt(built.Digest.String()), append(opts, WithPreferredSource("registry"))...)
	if pulled.Digest != built.Digest || pulled.Source != "registry "+host+"/x/hello:1" {
		t.Fatalf("pulled %s from %q; want %s from the registry", pulled.Digest, pulled.Source, built.Digest)
	}
	if got := resolveOne(t, withAlt(built.Digest.String()), opts...); !strings.HasPrefix(got.Source, "build ") {
		t.Errorf("without a preference the image came from %q, want its build source", got.Source)
	}
	_, err = Resolve(context.Background(), withAlt(""), append(opts, WithPreferredSource("registry"))...)
	wantErr(t, err, "registry.example/x/hello:1: alternatives[0]: "+host+"/x/hello:1 is not pinned")
	wrong := "sha256:" + strings.Repeat("0", 64)
	_, err = Resolve(context.Background(), withAlt(wrong), append(opts, WithPreferredSource("registry"))...)
	wantErr(t, err, "resolved to "+built.Digest.String()+" but the bundle pins "+wrong)
}
