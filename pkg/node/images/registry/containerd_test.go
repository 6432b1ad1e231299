package registry

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// containerd is a private containerd daemon for one test.
type containerd struct {
	sock string
	log  *lockedBuffer
}

// startContainerd runs containerd with its root, state and sockets in a
// temporary directory, and waits until it answers.
func startContainerd(t *testing.T) *containerd {
	t.Helper()
	bin := needTool(t, "containerd")
	needTool(t, "ctr")
	dir, err := os.MkdirTemp("", "ctrd") // short: unix socket paths are limited
	must(t, err)
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	c := &containerd{sock: filepath.Join(dir, "c.sock"), log: &lockedBuffer{}}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.opt",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc")
	cfgPath := filepath.Join(dir, "config.toml")
	must(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))

	cmd := exec.Command(bin, "--config", cfgPath, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = c.log, c.log
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.ctr("version")
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("containerd exited:\n%s", c.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not come up: %v: %s\n%s", err, out, c.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

func (c *containerd) ctr(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, "ctr", append([]string{"-a", c.sock, "-n", "test"}, args...)...).CombinedOutput()
}

// imageDigest is the digest `ctr images ls` reports for ref.
func (c *containerd) imageDigest(t *testing.T, ref string) string {
	t.Helper()
	out, err := c.ctr("images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 3 && fields[0] == ref {
			return fields[2]
		}
	}
	t.Fatalf("%s not in:\n%s", ref, out)
	return ""
}

// writeHostsTOML writes certs.d/<upstream>/hosts.toml as firstboot does
// (pkg/node/images/mirrors): the node's registry is both the host and the fallback
// server, so the upstream is never contacted.
func writeHostsTOML(t *testing.T, upstream, registry string) string {
	t.Helper()
	hostsDir := filepath.Join(t.TempDir(), "certs.d")
	must(t, os.MkdirAll(filepath.Join(hostsDir, upstream), 0o755))
	must(t, os.WriteFile(filepath.Join(hostsDir, upstream, "hosts.toml"), []byte(fmt.Sprintf(`server = "http://%s"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, registry, registry)), 0o644))
	return hostsDir
}

// requestLog records the request URIs a handler sees.
type requestLog struct {
	mu   sync.Mutex
	uris []string
}

func (l *requestLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.uris = append(l.uris, r.Method+" "+r.URL.RequestURI())
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (l *requestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.uris, "\n")
}

func TestContainerdPull(t *testing.T) {
	f := newFixture(t)
	st, err := OpenLayout(f.dir)
	must(t, err)
	log, _ := testLogger(t)
	s, err := New(WithStores(st), WithLogger(log))
	must(t, err)
	reqs := &requestLog{}
	srv := httptest.NewServer(reqs.wrap(s))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	c := startContainerd(t)

	t.Run("mirror", func(t *testing.T) {
		hostsDir := writeHostsTOML(t, "registry.k8s.io", host)
		if out, err := c.ctr("images", "pull", "--hosts-dir", hostsDir, "--snapshotter", "native", pauseRef); err != nil {
			t.Fatalf("ctr pull: %v\n%s\ncontainerd:\n%s", err, out, c.log)
		}
		if got, want := c.imageDigest(t, pauseRef), digestOf(t, f.pause).String(); got != want {
			t.Fatalf("digest %s, want %s", got, want)
		}
		// Manifests and blobs all came through the mirror, with ns.
		_, layer := layerPath(t, f.dir, f.pauseAMD64)
		for _, want := range []string{
			"/v2/pause/manifests/3.10?ns=registry.k8s.io",
			"/v2/pause/manifests/" + digestOf(t, f.pauseAMD64).String() + "?ns=registry.k8s.io",
			"/v2/pause/blobs/" + layer.String() + "?ns=registry.k8s.io",
		} {
			if !strings.Contains(reqs.String(), want) {
				t.Fatalf("the server never saw %s:\n%s", want, reqs)
			}
		}
	})

	t.Run("direct", func(t *testing.T) {
		ref := host + "/pause:3.10"
		if out, err := c.ctr("images", "pull", "--plain-http", "--snapshotter", "native", ref); err != nil {
			t.Fatalf("ctr pull: %v\n%s\ncontainerd:\n%s", err, out, c.log)
		}
		if got, want := c.imageDigest(t, ref), digestOf(t, f.pause).String(); got != want {
			t.Fatalf("digest %s, want %s", got, want)
		}
	})

	// A worker node's registry has an empty cache and pulls from a
	// control-plane peer over TLS.
	t.Run("through a peer", func(t *testing.T) {
		a, tlsConfig := peerA(t, f)
		cache := openCache(t)
		b, err := New(WithCache(cache), WithPeers([]string{a.URL}, tlsConfig), WithLogger(log))
		must(t, err)
		breqs := &requestLog{}
		bsrv := httptest.NewServer(breqs.wrap(b))
		t.Cleanup(bsrv.Close)
		hostsDir := writeHostsTOML(t, "docker.io", strings.TrimPrefix(bsrv.URL, "http://"))
		if out, err := c.ctr("images", "pull", "--hosts-dir", hostsDir, "--snapshotter", "native", helloRef); err != nil {
			t.Fatalf("ctr pull: %v\n%s\ncontainerd:\n%s", err, out, c.log)
		}
		if got, want := c.imageDigest(t, helloRef), digestOf(t, f.hello).String(); got != want {
			t.Fatalf("digest %s, want %s", got, want)
		}
		if !strings.Contains(breqs.String(), "/v2/library/hello/manifests/1.0?ns=docker.io") {
			t.Fatalf("requests:\n%s", breqs)
		}
		if b.Stats().PeerFetches == 0 {
			t.Fatal("nothing came from the peer")
		}
		if _, err := cache.Resolve(context.Background(), helloRepo, "1.0"); err != nil {
			t.Fatalf("not recorded in the cache: %v", err)
		}
	})
}
