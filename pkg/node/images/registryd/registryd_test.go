package registryd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRunServesBundle: the daemon serves the slot's bundle on loopback as
// soon as it reports ready, with no config file (a node not provisioned
// yet).
func TestRunServesBundle(t *testing.T) {
	dir := t.TempDir()
	bundleDir := filepath.Join(dir, "bundle")
	p, err := layout.Write(bundleDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref := "docker.io/library/hello:1.0"
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := startRun(t, ctx, Options{
		BundleDir: bundleDir, CacheDir: filepath.Join(dir, "cache"), ConfigFile: filepath.Join(dir, "missing.json"),
		Loopback: addr, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	resp, err := http.Get(fmt.Sprintf("http://%s/v2/library/hello/manifests/1.0?ns=docker.io", addr))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close() // only the status and headers count
	if resp.StatusCode != 200 || resp.Header.Get("Docker-Content-Digest") != digest.String() {
		t.Fatalf("manifest: %s, digest %q, want 200 and %s", resp.Status, resp.Header.Get("Docker-Content-Digest"), digest)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

func TestBadConfigIsAnError(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "registry.json")
	if err := os.WriteFile(cfg, []byte(`{"peers": ["10.0.0.1:5443"], "caFile": "/nonexistent.pem"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), Options{CacheDir: filepath.Join(dir, "cache"), ConfigFile: cfg, Loopback: freeAddr(t),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		t.Fatal("Run with peers but no CA file succeeded")
	}
}

// The peer listener binds to the node's cluster address even before the
// network has put it on an interface: 192.0.2.77 (TEST-NET-1) is on none
// here, and a plain bind to it fails.
func TestPeerListenerBindsBeforeTheAddressIsUp(t *testing.T) {
	const addr = "192.0.2.77:0"
	if ln, err := net.Listen("tcp", addr); err == nil {
		_ = ln.Close() // the test fails on the line below anyway
		t.Fatalf("%s is configured on this machine; the test needs an address that is not", addr)
	}
	ln, err := listenFreebind(context.Background(), addr)
	if err != nil {
		t.Fatalf("listen with IP_FREEBIND on %s: %v", addr, err)
	}
	defer ln.Close()
	if got := ln.Addr().(*net.TCPAddr).IP.String(); got != "192.0.2.77" {
		t.Errorf("listening on %s, want 192.0.2.77", got)
	}
}

// startRun runs Run with o, whose Notify it sets, and waits until the
// registry says it is ready. The channel yields Run's result.
func startRun(t *testing.T, ctx context.Context, o Options) <-chan error {
	t.Helper()
	ready := make(chan struct{})
	o.Notify = func() error { close(ready); return nil }
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready after 10s")
	}
	return done
}
