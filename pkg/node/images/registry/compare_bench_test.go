package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The comparison benchmarks serve the same content from this registry and
// from distribution/distribution v3 (the reference implementation, built by
// scripts/bench-registry.sh and named by $TERRARIUM_DIST_REGISTRY) on
// loopback, and GET it with the same client:
//
//	BenchmarkCompare/blob1GiB/{terrarium,distribution}   one 1 GiB blob
//	BenchmarkCompare/small4KiB/{terrarium,distribution}  4 KiB blobs, one GET each
//
// The ratio of their MB/s is the figure (docs/benchmarks.md).

const (
	bigBlob    = 1 << 30
	smallBlob  = 4 << 10
	smallCount = 2000
)

type blobSet struct {
	big    string   // digest of the 1 GiB blob
	small  []string // digests of the small blobs
	layout string   // OCI layout holding them (and a manifest naming them)
	repo   string
}

func writeBlob(dir string, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	d := fmt.Sprintf("sha256:%x", sum)
	return d, os.WriteFile(filepath.Join(dir, "blobs", "sha256", fmt.Sprintf("%x", sum)), data, 0o644)
}

// makeBlobSet writes the content once per benchmark binary run.
func makeBlobSet(b *testing.B, dir string) *blobSet {
	b.Helper()
	s := &blobSet{layout: dir, repo: "bench/blobs"}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	big := make([]byte, bigBlob)
	for i := 0; i < len(big); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			big[i+j] = byte(v >> (8 * j))
		}
	}
	var err error
	if s.big, err = writeBlob(dir, big); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < smallCount; i++ {
		d, err := writeBlob(dir, big[i*smallBlob:(i+1)*smallBlob])
		if err != nil {
			b.Fatal(err)
		}
		s.small = append(s.small, d)
	}
	cfg, _ := writeBlob(dir, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`))
	layers := []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": s.big, "size": bigBlob}}
	for _, d := range s.small {
		layers = append(layers, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": smallBlob})
	}
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": 80}, "layers": layers})
	md, err := writeBlob(dir, man)
	if err != nil {
		b.Fatal(err)
	}
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []map[string]any{{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": len(man),
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "localhost/" + s.repo + ":v1"}}}})
	must(b, os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644))
	must(b, os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
	return s
}

// pushToDistribution uploads every blob of s (monolithic uploads).
func pushToDistribution(b *testing.B, base string, s *blobSet) {
	b.Helper()
	for _, d := range append([]string{s.big}, s.small...) {
		f, err := os.Open(filepath.Join(s.layout, "blobs", "sha256", d[len("sha256:"):]))
		if err != nil {
			b.Fatal(err)
		}
		fi, _ := f.Stat()
		resp, err := http.Post(base+"/v2/"+s.repo+"/blobs/uploads/", "", nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = resp.Body.Close() // the header is the answer
		loc := resp.Header.Get("Location")
		if loc == "" {
			b.Fatalf("distribution upload: %s", resp.Status)
		}
		sep := "?"
		if bytes.ContainsRune([]byte(loc), '?') {
			sep = "&"
		}
		req, _ := http.NewRequest(http.MethodPut, loc+sep+"digest="+d, f)
		req.ContentLength = fi.Size()
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err = http.DefaultClient.Do(req)
		_ = f.Close() // read only, and closed by Do already
		if err != nil {
			b.Fatal(err)
		}
		_ = resp.Body.Close() // the status is the answer
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("distribution PUT %s: %s", d, resp.Status)
		}
	}
}

type servers struct{ terrarium, distribution string }

func setupCompare(b *testing.B) (*blobSet, servers) {
	b.Helper()
	dist := os.Getenv("TERRARIUM_DIST_REGISTRY")
	if dist == "" {
		b.Fatal("TERRARIUM_DIST_REGISTRY is not set: run scripts/bench-registry.sh (make bench)")
	}
	dir, err := os.MkdirTemp("", "terrarium-regbench-")
	if err != nil {
		b.Fatal(err)
	}
	s := makeBlobSet(b, filepath.Join(dir, "layout"))
	// terrarium
	st, err := OpenLayout(s.layout)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(WithStores(st), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	serveUntilCleanup(b, ln, srv)
	// distribution, on a port free a moment ago
	dln, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	daddr := dln.Addr().String()
	must(b, dln.Close())
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: false\nhttp:\n  addr: %s\n", filepath.Join(dir, "dist"), daddr)
	cfgPath := filepath.Join(dir, "config.yml")
	must(b, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	cmd := exec.Command(dist, "serve", cfgPath)
	// No tracing exporter: it would retry a collector that is not there.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	base := "http://" + daddr
	for i := 0; ; i++ {
		if resp, err := http.Get(base + "/v2/"); err == nil {
			_ = resp.Body.Close() // an answer is all it waits for
			break
		}
		if i > 100 {
			b.Fatal("distribution registry did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	pushToDistribution(b, base, s)
	b.Cleanup(func() {
		// Killed: its exit status says nothing; the directory is scratch.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	})
	return s, servers{terrarium: "http://" + ln.Addr().String(), distribution: base}
}

func get(b *testing.B, c *http.Client, url string, want int64) {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close() // read only
	if err != nil || resp.StatusCode != 200 || n != want {
		b.Fatalf("GET %s: %s, %d bytes, %v", url, resp.Status, n, err)
	}
}

// BenchmarkCompare serves one content set from both registries.
func BenchmarkCompare(b *testing.B) {
	s, srv := setupCompare(b)
	for _, tc := range []struct{ name, base string }{{"terrarium", srv.terrarium}, {"distribution", srv.distribution}} {
		b.Run("blob1GiB/"+tc.name, func(b *testing.B) {
			c := &http.Client{}
			url := tc.base + "/v2/" + s.repo + "/blobs/" + s.big
			get(b, c, url, bigBlob) // warm: the first GET verifies the digest
			b.SetBytes(bigBlob)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				get(b, c, url, bigBlob)
			}
		})
	}
	for _, tc := range []struct{ name, base string }{{"terrarium", srv.terrarium}, {"distribution", srv.distribution}} {
		b.Run("small4KiB/"+tc.name, func(b *testing.B) {
			c := &http.Client{}
			for _, d := range s.small { // warm
				get(b, c, tc.base+"/v2/"+s.repo+"/blobs/"+d, smallBlob)
			}
			b.SetBytes(smallBlob)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				get(b, c, tc.base+"/v2/"+s.repo+"/blobs/"+s.small[i%smallCount], smallBlob)
			}
		})
	}
}
