package registry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// BenchmarkPeerServing: ten clients pull the whole bundle at once (every
// image's manifest, config and layers, read to the end) from one
// registry over mutual TLS, as the nodes of a cluster pull from a control
// plane: this registry serving the bundle's OCI layout against
// distribution/distribution v3 ($TERRARIUM_DIST_REGISTRY) serving the same
// images pushed into it, with the same certificates, in the same run. The
// bundle is the one the build that wrote the manifest $TERRARIUM_BUNDLE_OF
// (out/manifest.json) put into its slot, from the build cache
// $TERRARIUM_CACHE. The figure is the ratio of the times
// (docs/benchmarks.md).
func BenchmarkPeerServing(b *testing.B) {
	dist := os.Getenv("TERRARIUM_DIST_REGISTRY")
	if os.Getenv("TERRARIUM_BUNDLE_OF") == "" || dist == "" || os.Getenv("TERRARIUM_CACHE") == "" {
		b.Fatal("TERRARIUM_BUNDLE_OF, TERRARIUM_CACHE and TERRARIUM_DIST_REGISTRY must be set: run scripts/bench-registry.sh (make bench)")
	}
	bundleDir := findBundle(b, os.Getenv("TERRARIUM_BUNDLE_OF"), os.Getenv("TERRARIUM_CACHE"))
	dir := b.TempDir()
	pki := benchPKI(b, dir)
	refs := bundleRefs(b, bundleDir)

	// This registry, as a control plane serves its peers.
	st, err := OpenLayout(bundleDir)
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
	serveUntilCleanup(b, tls.NewListener(ln, pki.server), srv)
	ours := ln.Addr().String()

	// distribution v3, the same certificates, the same images.
	dln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	theirs := dln.Addr().String()
	if err := dln.Close(); err != nil { // free for distribution
		b.Fatal(err)
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
  tls:
    certificate: %s
    key: %s
    clientcas: [%s]
`, filepath.Join(dir, "dist"), theirs, pki.certFile, pki.keyFile, pki.caFile)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(dist, "serve", cfgPath)
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill() // killed: its exit status says nothing
		_ = cmd.Wait()
	})
	waitTLS(b, theirs, pki.client)
	p, err := layout.FromPath(bundleDir)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range refs {
		img, err := p.Image(r.digest)
		if err != nil {
			b.Fatal(err)
		}
		ref, err := name.ParseReference(theirs + "/" + r.repo + ":" + r.tag)
		if err != nil {
			b.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithTransport(&http.Transport{TLSClientConfig: pki.client})); err != nil {
			b.Fatalf("push %s into distribution: %v", ref, err)
		}
	}

	const clients = 10
	for _, tc := range []struct{ name, addr string }{{"terrarium", ours}, {"distribution", theirs}} {
		b.Run(tc.name, func(b *testing.B) {
			pullAll(b, tc.addr, refs, pki.client, 1) // warm: this registry hashes each blob once
			b.ResetTimer()
			var bytes int64
			for i := 0; i < b.N; i++ {
				bytes = pullAll(b, tc.addr, refs, pki.client, clients)
			}
			b.ReportMetric(float64(bytes)/(1<<20)/b.Elapsed().Seconds()*float64(b.N), "MiB/s")
		})
	}
}

// findBundle finds in the build cache the bundle layout whose images are
// those the build manifest at manifestPath lists.
func findBundle(b *testing.B, manifestPath, cacheRoot string) string {
	var built struct {
		Bundle struct {
			Images json.RawMessage `json:"images"`
		} `json:"bundle"`
	}
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(data, &built); err != nil {
		b.Fatalf("%s: %v", manifestPath, err)
	}
	want, err := canonical(built.Bundle.Images)
	if err != nil {
		b.Fatal(err)
	}
	entries, err := filepath.Glob(filepath.Join(cacheRoot, "bundle-layout", "*", "manifest.json"))
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		var m struct {
			Images json.RawMessage `json:"images"`
		}
		data, err := os.ReadFile(e)
		if err != nil || json.Unmarshal(data, &m) != nil {
			continue
		}
		if got, err := canonical(m.Images); err == nil && got == want {
			return filepath.Join(filepath.Dir(e), "layout")
		}
	}
	b.Fatalf("no bundle layout in %s holds the images %s lists (build it: make image)", cacheRoot, manifestPath)
	return ""
}

// canonical is raw JSON re-encoded, for comparing.
func canonical(raw json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// bundleRef is one named image of the bundle.
type bundleRef struct {
	repo, tag string
	digest    v1.Hash
}

func bundleRefs(b *testing.B, dir string) []bundleRef {
	p, err := layout.FromPath(dir)
	if err != nil {
		b.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		b.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		b.Fatal(err)
	}
	var refs []bundleRef
	for _, d := range m.Manifests {
		n := d.Annotations["io.containerd.image.name"]
		if n == "" {
			n = d.Annotations["org.opencontainers.image.ref.name"]
		}
		i := strings.LastIndexByte(n, ':')
		if i < 0 || !d.MediaType.IsImage() {
			continue
		}
		refs = append(refs, bundleRef{repo: n[:i], tag: n[i+1:], digest: d.Digest})
	}
	if len(refs) == 0 {
		b.Fatalf("%s names no image", dir)
	}
	return refs
}

// pullAll has clients clients, each with its own connections, pull every
// image at once, and returns the bytes one client read.
func pullAll(b *testing.B, addr string, refs []bundleRef, tlsConfig *tls.Config, clients int) int64 {
	var wg sync.WaitGroup
	results := make(chan int64, clients)
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{TLSClientConfig: tlsConfig.Clone(), MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			var n int64
			for _, r := range refs {
				ref, err := name.ParseReference(addr + "/" + r.repo + ":" + r.tag)
				if err != nil {
					errs <- err
					return
				}
				img, err := remote.Image(ref, remote.WithTransport(tr))
				if err != nil {
					errs <- fmt.Errorf("pull %s: %w", ref, err)
					return
				}
				ls, err := img.Layers()
				if err != nil {
					errs <- err
					return
				}
				for _, l := range ls {
					rc, err := l.Compressed() // read whole, its digest checked
					if err != nil {
						errs <- err
						return
					}
					k, err := io.Copy(io.Discard, rc)
					if cerr := rc.Close(); err == nil {
						err = cerr
					}
					if err != nil {
						errs <- fmt.Errorf("pull %s: %w", ref, err)
						return
					}
					n += k
				}
			}
			results <- n
		}()
	}
	wg.Wait()
	close(errs)
	close(results)
	for err := range errs {
		b.Fatal(err)
	}
	var read int64
	for n := range results {
		read = max(read, n)
	}
	return read
}

// benchPKI is a CA, a server certificate for 127.0.0.1 and a client one,
// as files (for distribution) and TLS configs.
type benchPKIFiles struct {
	caFile, certFile, keyFile string
	server, client            *tls.Config
}

func benchPKI(b *testing.B, dir string) benchPKIFiles {
	b.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		b.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "bench"},
			NotBefore: caTmpl.NotBefore, NotAfter: caTmpl.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ca, key.Public(), caKey)
		if err != nil {
			b.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srvCert, srvKey := issue(2, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := issue(3, x509.ExtKeyUsageClientAuth)
	f := benchPKIFiles{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "server.pem"), keyFile: filepath.Join(dir, "server-key.pem")}
	for p, data := range map[string][]byte{f.caFile: caPEM, f.certFile: srvCert, f.keyFile: srvKey} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	sc, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		b.Fatal(err)
	}
	cc, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		b.Fatal(err)
	}
	f.server = &tls.Config{Certificates: []tls.Certificate{sc}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	f.client = &tls.Config{Certificates: []tls.Certificate{cc}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return f
}

// waitTLS waits until a registry answers /v2/ over TLS at addr.
func waitTLS(b *testing.B, addr string, tlsConfig *tls.Config) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 2 * time.Second}
	for i := 0; ; i++ {
		if resp, err := c.Get("https://" + addr + "/v2/"); err == nil {
			_ = resp.Body.Close() // an answer is all it waits for
			return
		}
		if i > 100 {
			b.Fatalf("no registry answers at %s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
