package bundle

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// testRegistry serves an in-process registry holding an image at
// <host>/x/app:1 and a two-platform index at <host>/x/multi:1.
func testRegistry(t *testing.T) (srv *httptest.Server, img v1.Image, idx v1.ImageIndex) {
	t.Helper()
	srv = httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	img = testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	idx = testIndex(t, "linux/amd64", "linux/arm64")
	push := func(ref string, write func(name.Reference) error) {
		r, err := name.ParseReference(host + ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(r); err != nil {
			t.Fatal(err)
		}
	}
	push("/x/app:1", func(r name.Reference) error { return remote.Write(r, img) })
	push("/x/multi:1", func(r name.Reference) error { return remote.WriteIndex(r, idx) })
	return srv, img, idx
}

func registryBundle(t *testing.T, ref, pin, platforms string) *Bundle {
	t.Helper()
	body := "images:\n  - name: registry.example/x/app:1\n    source:\n      registry: {ref: \"" + ref + "\"}\n"
	if pin != "" {
		body += "      digest: " + pin + "\n"
	}
	if platforms != "" {
		body = "platforms: " + platforms + "\n" + body
	}
	return writeBundle(t, t.TempDir(), body)
}

func TestRegistrySource(t *testing.T) {
	srv, img, idx := testRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	imgDigest, idxDigest := digestOf(t, img), digestOf(t, idx)
	im, _ := idx.IndexManifest()
	arm64 := im.Manifests[1].Digest
	wrong := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", 7)}
	tests := []struct {
		name      string
		ref       string
		pin       string
		platforms string
		want      v1.Hash
		wantErr   []string
	}{
		{name: "pinned image", ref: host + "/x/app@" + imgDigest.String(), want: imgDigest},
		{name: "pinned image and digest", ref: host + "/x/app@" + imgDigest.String(), pin: imgDigest.String(), want: imgDigest},
		{name: "index for one platform", ref: host + "/x/multi@" + idxDigest.String(), platforms: "[linux/arm64]", want: arm64},
		{name: "index for all platforms", ref: host + "/x/multi@" + idxDigest.String(), platforms: "[linux/amd64, linux/arm64]", want: idxDigest},
		{name: "wrong ref digest", ref: host + "/x/app@" + wrong.String(),
			wantErr: []string{"registry.example/x/app:1: registry " + host + "/x/app@" + wrong.String() + ": pull:", "MANIFEST_UNKNOWN"}},
		{name: "wrong pin", ref: host + "/x/app@" + imgDigest.String(), pin: wrong.String(),
			wantErr: []string{"registry.example/x/app:1: resolved to " + imgDigest.String() + " but the bundle pins " + wrong.String()}},
		{name: "missing platform", ref: host + "/x/multi@" + idxDigest.String(), platforms: "[linux/s390x]",
			wantErr: []string{"has no linux/s390x image (it has linux/amd64, linux/arm64)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := registryBundle(t, tt.ref, tt.pin, tt.platforms)
			rs, err := Resolve(context.Background(), b, WithCacheDir(t.TempDir()))
			if tt.wantErr != nil {
				wantErr(t, err, tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rs[0].Digest != tt.want {
				t.Errorf("resolved %s, want %s", rs[0].Digest, tt.want)
			}
			if rs[0].Source != "registry "+tt.ref {
				t.Errorf("source %q", rs[0].Source)
			}
			if rs[0].Image != nil {
				if err := validate.Image(rs[0].Image); err != nil {
					t.Errorf("validate: %v", err)
				}
			} else if err := validate.Index(rs[0].Index); err != nil {
				t.Errorf("validate: %v", err)
			}
		})
	}
}

func TestRegistryUnreachable(t *testing.T) {
	srv := httptest.NewServer(nil)
	host := strings.TrimPrefix(srv.URL, "http://")
	srv.Close() // nothing listens there any more
	ref := host + "/x/app@sha256:" + strings.Repeat("a", 64)
	_, err := Resolve(context.Background(), registryBundle(t, ref, "", ""), WithCacheDir(t.TempDir()))
	wantErr(t, err, "registry.example/x/app:1: registry "+ref+": pull:", "connection refused")
}

// TestRegistryCached resolves from a registry, then again with the
// registry gone: the pinned image comes from the cache.
func TestRegistryCached(t *testing.T) {
	srv, img, _ := testRegistry(t)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/x/app@" + digestOf(t, img).String()
	b := registryBundle(t, ref, "", "")
	cacheDir := t.TempDir()
	var progress []int64
	first := resolveOne(t, b, WithCacheDir(cacheDir), WithProgress(func(image string, done, total int64) {
		if image != "registry.example/x/app:1" || done > total {
			t.Errorf("progress(%s, %d, %d)", image, done, total)
		}
		progress = append(progress, done, total)
	}))
	if n := len(progress); n == 0 || progress[n-2] != progress[n-1] {
		t.Errorf("progress %v does not end complete", progress)
	}
	srv.Close()
	second := resolveOne(t, b, WithCacheDir(cacheDir))
	if first.Digest != second.Digest {
		t.Errorf("cached resolve gave %s, want %s", second.Digest, first.Digest)
	}
	if err := validate.Image(second.Image); err != nil {
		t.Errorf("cached image: %v", err)
	}
}

// TestRegistryInsecure pulls from a registry with a self-signed
// certificate, which works only when the bundle marks it insecure.
func TestRegistryInsecure(t *testing.T) {
	quiet := log.New(io.Discard, "", 0)
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(quiet)))
	srv.Config.ErrorLog = quiet
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	img := testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	ref, _ := name.ParseReference(host + "/x/app:1")
	if err := remote.Write(ref, img, remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	pinned := host + "/x/app@" + digestOf(t, img).String()
	for _, insecure := range []bool{true, false} {
		body := fmt.Sprintf("images:\n  - name: registry.example/x/app:1\n    source:\n      registry: {ref: %q, insecure: %v}\n", pinned, insecure)
		b := writeBundle(t, t.TempDir(), body)
		rs, err := Resolve(context.Background(), b, WithCacheDir(t.TempDir()))
		switch {
		case insecure && err != nil:
			t.Errorf("insecure: %v", err)
		case insecure && rs[0].Digest != digestOf(t, img):
			t.Errorf("insecure: resolved %s", rs[0].Digest)
		case !insecure:
			wantErr(t, err, "registry "+pinned+": pull:")
		}
	}
}
