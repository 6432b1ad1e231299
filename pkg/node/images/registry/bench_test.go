package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// bigBlobLayout writes a layout holding one random blob of size bytes.
func bigBlobLayout(b *testing.B, size int64) (string, v1.Hash) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "layout")
	_, err := layout.Write(dir, empty.Index)
	must(b, err)
	tmp := filepath.Join(dir, "blob.tmp")
	f, err := os.Create(tmp)
	must(b, err)
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{1})
	_, err = io.CopyN(io.MultiWriter(f, h), rng, size)
	must(b, err)
	must(b, f.Close())
	d := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	must(b, os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755))
	must(b, os.Rename(tmp, filepath.Join(dir, "blobs", "sha256", d.Hex)))
	return dir, d
}

func getAll(b *testing.B, client *http.Client, url string, size int64) {
	resp, err := client.Get(url)
	must(b, err)
	n, err := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close() // read only
	must(b, err)
	if resp.StatusCode != http.StatusOK || n != size {
		b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
	}
}

// BenchmarkBlobGet256MiB measures sequential GETs of one 256 MiB blob over
// loopback, after the first GET (which also hashes it) — reported apart.
func BenchmarkBlobGet256MiB(b *testing.B) {
	const size = 256 << 20
	dir, d := bigBlobLayout(b, size)
	st, err := OpenLayout(dir)
	must(b, err)
	srv, _, _ := startServer(b, WithStores(st))
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	url := srv.URL + "/v2/big/blobs/" + d.String()

	start := time.Now()
	getAll(b, client, url, size)
	first := time.Since(start)

	b.SetBytes(size)
	for b.Loop() {
		getAll(b, client, url, size)
	}
	b.ReportMetric(float64(size)/1e6/first.Seconds(), "first-GET-MB/s")
}

// BenchmarkSmallBlobGet measures GETs of 4 KiB blobs (1000 distinct ones,
// all verified before the timer starts) over one keep-alive connection.
func BenchmarkSmallBlobGet(b *testing.B) {
	const n, size = 1000, 4 << 10
	dir := filepath.Join(b.TempDir(), "layout")
	_, err := layout.Write(dir, empty.Index)
	must(b, err)
	must(b, os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755))
	rng := rand.NewChaCha8([32]byte{2})
	urls := make([]string, n)
	st, err := OpenLayout(dir)
	must(b, err)
	srv, _, _ := startServer(b, WithStores(st))
	for i := range urls {
		buf := make([]byte, size)
		_, _ = rng.Read(buf)
		sum := sha256.Sum256(buf)
		hexd := hex.EncodeToString(sum[:])
		must(b, os.WriteFile(filepath.Join(dir, "blobs", "sha256", hexd), buf, 0o444))
		urls[i] = srv.URL + "/v2/small/blobs/sha256:" + hexd
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for _, u := range urls {
		getAll(b, client, u, size)
	}
	b.SetBytes(size)
	i := 0
	for b.Loop() {
		getAll(b, client, urls[i%n], size)
		i++
	}
}
