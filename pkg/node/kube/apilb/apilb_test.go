package apilb

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Generous bounds: the tests must pass on a loaded 2-core machine under
// -race. Nothing waits this long when things work.
const (
	waitLong = 15 * time.Second
	prompt   = 5 * time.Second
)

// apiServer is a stand-in kube-apiserver: HTTPS, /readyz answers with a
// settable status and /id with the server's name.
type apiServer struct {
	name   string
	srv    *httptest.Server
	status atomic.Int32
	// probes counts /readyz requests, conns the connections accepted.
	probes, conns atomic.Int32
}

func (a *apiServer) addr() string { return a.srv.Listener.Addr().String() }

func newAPIServer(t *testing.T, name string) *apiServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return newAPIServerOn(t, name, ln)
}

func newAPIServerOn(t *testing.T, name string, ln net.Listener) *apiServer {
	t.Helper()
	a := &apiServer{name: name}
	a.status.Store(http.StatusOK)
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		a.probes.Add(1)
		code := int(a.status.Load())
		w.WriteHeader(code)
		fmt.Fprintln(w, http.StatusText(code))
	})
	mux.HandleFunc("/id", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, name)
	})
	a.srv = httptest.NewUnstartedServer(mux)
	_ = a.srv.Listener.Close()
	a.srv.Listener = ln
	// Probes cut off when a server or the balancer stops are expected.
	a.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	a.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			a.conns.Add(1)
		}
	}
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	return a
}

// newTCPServer serves raw TCP on 127.0.0.1 with handle, one goroutine per
// connection, and returns its address.
func newTCPServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		conns   = map[net.Conn]bool{}
		stopped bool // a connection accepted after the cleanup closed the others is closed at once
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if stopped {
				mu.Unlock()
				_ = c.Close()
				continue
			}
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		stopped = true
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func echo(c net.Conn) { _, _ = io.Copy(c, c) }

// echoUnlessTLS echoes, but holds a connection that starts with a TLS
// record (a health probe) without answering, so probes never finish.
func echoUnlessTLS(c net.Conn) {
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return
	}
	if first[0] == 0x16 {
		_, _ = io.Copy(io.Discard, c)
		return
	}
	if _, err := c.Write(first[:]); err != nil {
		return
	}
	_, _ = io.Copy(c, c)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startBalancer runs a Balancer for cfg on a fresh loopback listener until
// the test ends, and checks ServeListener then returns nil.
func startBalancer(t *testing.T, cfg Config) (*Balancer, string) {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = testLogger(t)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = prompt
	}
	b, err := New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			assert.NoError(t, err, "ServeListener: %v", err)
		case <-time.After(waitLong):
			assert.Fail(t, "ServeListener did not return after cancel")
		}
	})
	return b, ln.Addr().String()
}

// waitFor polls cond until it holds or waitLong passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

// waitHealth waits until a probe round has finished and each backend's
// health is as in want (keyed by address).
func waitHealth(t *testing.T, b *Balancer, want map[string]bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("backend health %v", want), func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.probed {
			return false
		}
		for _, be := range b.backends {
			if h, ok := want[be.addr]; ok && (!be.checked || be.healthy != h) {
				return false
			}
		}
		return true
	})
}

func status(t *testing.T, b *Balancer, addr string) BackendStatus {
	t.Helper()
	for _, s := range b.Status() {
		if s.Address == addr {
			return s
		}
	}
	require.Fail(t, "backend not in Status()", "no status for %s in %+v", addr, b.Status())
	return BackendStatus{}
}

// apiClient is what kubelet does: HTTPS to the API through the balancer,
// one connection per request.
func apiClient(lbAddr string) *http.Client {
	d := net.Dialer{Timeout: prompt}
	return &http.Client{
		Timeout: waitLong,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", lbAddr)
			},
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
		},
	}
}

func getID(c *http.Client) (string, error) {
	resp, err := c.Get("https://kubernetes/id")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(body), nil
}

// openID opens a long-lived HTTPS connection through the balancer, asks
// which backend it reached, and leaves the connection open.
func openID(t *testing.T, lbAddr string) (string, net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", lbAddr, prompt)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
	require.NoError(t, tc.SetDeadline(time.Now().Add(waitLong)))
	req, err := http.NewRequest(http.MethodGet, "https://kubernetes/id", nil)
	require.NoError(t, err)
	err = req.Write(tc)
	require.NoError(t, err, "send request through balancer: %v", err)
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	require.NoError(t, err, "read response through balancer: %v", err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, tc.SetDeadline(time.Time{}))
	return string(body), tc
}

// expectClosed checks c is closed by the other side promptly.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	start := time.Now()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(prompt)))
	n, err := c.Read(make([]byte, 64))
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "connection still open after %v", time.Since(start))
	require.Error(t, err, "read %d bytes, want the connection closed", n)
}

func TestClientReachesBackends(t *testing.T) {
	a, bb := newAPIServer(t, "a"), newAPIServer(t, "b")
	b, lb := startBalancer(t, Config{
		Backends:       []string{a.addr(), bb.addr()},
		HealthInterval: 50 * time.Millisecond,
	})
	waitHealth(t, b, map[string]bool{a.addr(): true, bb.addr(): true})

	c := apiClient(lb)
	seen := map[string]int{}
	for range 6 {
		id, err := getID(c)
		require.NoError(t, err, "GET through balancer: %v", err)
		seen[id]++
	}
	// Sequential short connections rotate between idle backends; whatever
	// the timing of releases, no backend gets three in a row.
	assert.NotZero(t, seen["a"], "backends used %v, want both a and b", seen)
	assert.NotZero(t, seen["b"], "backends used %v, want both a and b", seen)
	assert.Len(t, seen, 2, "backends used %v, want both a and b", seen)
	for _, s := range b.Status() {
		assert.True(t, s.Healthy, "status %+v, want healthy and checked", s)
		assert.Empty(t, s.LastError, "status %+v, want healthy and checked", s)
		assert.False(t, s.LastChecked.IsZero(), "status %+v, want healthy and checked", s)
	}
}

func TestFewestConnections(t *testing.T) {
	a, bb := newAPIServer(t, "a"), newAPIServer(t, "b")
	b, lb := startBalancer(t, Config{
		Backends:       []string{a.addr(), bb.addr()},
		HealthInterval: 50 * time.Millisecond,
	})
	waitHealth(t, b, map[string]bool{a.addr(): true, bb.addr(): true})

	seen := map[string]int{}
	var (
		conns []net.Conn
		ids   []string
	)
	for range 6 {
		id, c := openID(t, lb)
		seen[id]++
		conns = append(conns, c)
		ids = append(ids, id)
	}
	assert.Equal(t, 3, seen["a"], "long-lived connections per backend %v, want 3 each", seen)
	assert.Equal(t, 3, seen["b"], "long-lived connections per backend %v, want 3 each", seen)
	for _, s := range b.Status() {
		assert.Equal(t, 3, s.ActiveConns, "%s: ActiveConns %d, want 3", s.Address, s.ActiveConns)
	}

	// Unbalance them: close two of a's. New connections go to a until it
	// has as many as b again.
	var left []net.Conn
	closed := 0
	for i, c := range conns {
		if ids[i] == "a" && closed < 2 {
			_ = c.Close()
			closed++
			continue
		}
		left = append(left, c)
	}
	waitFor(t, "closed connections released", func() bool {
		return status(t, b, a.addr()).ActiveConns == 1
	})
	for range 2 {
		id, c := openID(t, lb)
		left = append(left, c)
		assert.Equal(t, "a", id, "new connection went to %s, want a, which has fewer", id)
	}
	for _, s := range b.Status() {
		assert.Equal(t, 3, s.ActiveConns, "%s: ActiveConns %d, want 3", s.Address, s.ActiveConns)
	}

	for _, c := range left {
		_ = c.Close()
	}
	waitFor(t, "all connections released", func() bool {
		for _, s := range b.Status() {
			if s.ActiveConns != 0 {
				return false
			}
		}
		return true
	})
}

func TestUnhealthyBackendAvoided(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    func(*apiServer)
		wantErr string
	}{
		{"readyz 500", func(a *apiServer) { a.status.Store(http.StatusInternalServerError) }, "500"},
		{"server closed", func(a *apiServer) { a.srv.Close() }, "probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, bb := newAPIServer(t, "a"), newAPIServer(t, "b")
			b, lb := startBalancer(t, Config{
				Backends:       []string{a.addr(), bb.addr()},
				HealthInterval: 50 * time.Millisecond,
			})
			waitHealth(t, b, map[string]bool{a.addr(): true, bb.addr(): true})

			tc.fail(a)
			waitHealth(t, b, map[string]bool{a.addr(): false, bb.addr(): true})
			s := status(t, b, a.addr())
			assert.False(t, s.Healthy, "status of failed backend %+v, want unhealthy with an error containing %q", s, tc.wantErr)
			assert.Contains(t, s.LastError, tc.wantErr, "status of failed backend %+v, want unhealthy with an error containing %q", s, tc.wantErr)
			assert.False(t, s.LastChecked.IsZero(), "status of failed backend %+v, want unhealthy with an error containing %q", s, tc.wantErr)

			c := apiClient(lb)
			for range 4 {
				id, err := getID(c)
				require.NoError(t, err, "GET through balancer: %v", err)
				assert.Equal(t, "b", id, "connection went to %s, want only the healthy b", id)
			}
			// Long-lived ones too, though b then has more connections.
			for range 3 {
				id, _ := openID(t, lb)
				assert.Equal(t, "b", id, "long-lived connection went to %s, want only the healthy b", id)
			}

			hs := status(t, b, bb.addr())
			assert.True(t, hs.Healthy, "status of the healthy backend %+v", hs)
			assert.Empty(t, hs.LastError, "status of the healthy backend %+v", hs)
		})
	}
}

func TestAllBackendsDown(t *testing.T) {
	addrA, addrB := freeAddr(t), freeAddr(t)
	b, lb := startBalancer(t, Config{
		Backends:       []string{addrA, addrB},
		HealthInterval: 50 * time.Millisecond,
		DialTimeout:    prompt,
	})
	waitHealth(t, b, map[string]bool{addrA: false, addrB: false})
	for _, s := range b.Status() {
		assert.NotEmpty(t, s.LastError, "status %+v: unhealthy without an error", s)
	}

	// A client is accepted, then closed as soon as no backend takes it.
	for range 3 {
		c, err := net.DialTimeout("tcp", lb, prompt)
		require.NoError(t, err)
		expectClosed(t, c)
		_ = c.Close()
	}
	_, err := getID(apiClient(lb))
	require.Error(t, err, "GET through balancer succeeded with every backend down")

	// One comes back on its address: connections work again.
	ln, err := net.Listen("tcp", addrB)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addrB, err)
	}
	newAPIServerOn(t, "b", ln)
	c := apiClient(lb)
	waitFor(t, "a connection through the balancer", func() bool {
		id, err := getID(c)
		return err == nil && id == "b"
	})
	waitHealth(t, b, map[string]bool{addrA: false, addrB: true})
	for range 3 {
		id, err := getID(c)
		assert.NoError(t, err, "GET through balancer = %q, %v; want b", id, err)
		assert.Equal(t, "b", id, "GET through balancer = %q, %v; want b", id, err)
	}
}

func TestBeforeFirstProbe(t *testing.T) {
	dead := freeAddr(t)
	live := newTCPServer(t, echoUnlessTLS) // accepts TCP, never answers a probe
	b, lb := startBalancer(t, Config{
		Backends:       []string{dead, live},
		HealthInterval: time.Hour,
		HealthTimeout:  time.Hour,
		DialTimeout:    prompt,
	})

	for i := range 4 { // from each rotating start, dead one first or not
		c, err := net.DialTimeout("tcp", lb, prompt)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(waitLong)))
		msg := fmt.Sprintf("hello %d", i)
		_, err = io.WriteString(c, msg)
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(c, got)
		require.NoError(t, err, "read echo through balancer: %v", err)
		assert.Equal(t, msg, string(got), "echo %q, want %q", got, msg)
		_ = c.Close()
	}

	b.mu.Lock()
	probed := b.probed
	b.mu.Unlock()
	assert.False(t, probed, "a probe round finished, but the live backend never answers probes")
	s := status(t, b, live)
	assert.True(t, s.LastChecked.IsZero(), "live backend status %+v, want never checked", s)
	assert.False(t, s.Healthy, "live backend status %+v, want never checked", s)
}

func TestServeShutdown(t *testing.T) {
	backend := newTCPServer(t, echo)
	listen := freeAddr(t)
	b, err := New(Config{
		Listen:         listen,
		Backends:       []string{backend},
		HealthInterval: 50 * time.Millisecond,
		HealthTimeout:  prompt,
		Log:            testLogger(t),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- b.Serve(ctx) }()

	var c net.Conn
	waitFor(t, "the balancer to listen", func() bool {
		select {
		case err := <-errc:
			require.Fail(t, "Serve returned before cancel", "Serve: %v", err)
		default:
		}
		c, err = net.DialTimeout("tcp", listen, prompt)
		return err == nil
	})
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(waitLong)))
	_, err = io.WriteString(c, "ping")
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err, "echo through balancer: %q, %v", got, err)
	require.Equal(t, "ping", string(got), "echo through balancer: %q, %v", got, err)
	waitFor(t, "the connection to be counted", func() bool { return b.Status()[0].ActiveConns == 1 })

	cancel()
	select {
	case err := <-errc:
		assert.NoError(t, err, "Serve after cancel = %v, want nil", err)
	case <-time.After(waitLong):
		require.Fail(t, "Serve did not return after cancel")
	}
	expectClosed(t, c)
	n := b.Status()[0].ActiveConns
	assert.Zero(t, n, "ActiveConns after Serve returned = %d, want 0", n)
	c2, err := net.DialTimeout("tcp", listen, prompt)
	if err == nil {
		_ = c2.Close()
	}
	assert.Error(t, err, "the balancer's address still accepts connections after Serve returned")
}

func TestServeListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	b, err := New(Config{Listen: ln.Addr().String(), Backends: []string{"127.0.0.1:1"}})
	require.NoError(t, err)
	err = b.Serve(context.Background())
	assert.ErrorContains(t, err, "listen "+ln.Addr().String(), "Serve on a busy address = %v, want a listen error naming it", err)
}

func TestHalfClose(t *testing.T) {
	// The backend reads the whole request before it answers, as a client
	// that shuts its write side expects.
	backend := newTCPServer(t, func(c net.Conn) {
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "got %d bytes", n)
	})
	_, lb := startBalancer(t, Config{Backends: []string{backend}, HealthInterval: time.Hour})

	c, err := net.DialTimeout("tcp", lb, prompt)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(waitLong)))
	_, err = c.Write(make([]byte, 100000))
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	got, err := io.ReadAll(c)
	require.NoError(t, err, "read after half-close: %v", err)
	assert.Equal(t, "got 100000 bytes", string(got), "answer %q, want %q", got, "got 100000 bytes")
}

// TestProbeKeepsConnection: probes share a connection (a TLS handshake
// per probe cost a starved emulated worker seconds), and a round now and
// then dials afresh, to check the backend still accepts.
func TestProbeKeepsConnection(t *testing.T) {
	a := newAPIServer(t, "a")
	startBalancer(t, Config{Backends: []string{a.addr()}, HealthInterval: 5 * time.Millisecond})
	rounds := int32(3*probesPerConnection + 1)
	waitFor(t, fmt.Sprintf("%d probes", rounds), func() bool { return a.probes.Load() >= rounds })
	probes, conns := a.probes.Load(), a.conns.Load()
	assert.GreaterOrEqual(t, conns, int32(3), "a fresh connection every %d rounds (%d probes)", probesPerConnection, probes)
	assert.LessOrEqual(t, conns, probes/probesPerConnection+1, "connections kept between probes (%d probes)", probes)
}

// TestProbeHandshakeBounded: a backend that accepts but never completes the
// TLS handshake gets its probe connection closed within HealthTimeout,
// though net/http goes on dialing after the probe gives up.
func TestProbeHandshakeBounded(t *testing.T) {
	closed := make(chan struct{}, 1)
	backend := newTCPServer(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c) // never answers; returns when the prober closes
		closed <- struct{}{}
	})
	const timeout = 200 * time.Millisecond
	b, err := New(Config{Listen: "127.0.0.1:0", Backends: []string{backend}, HealthTimeout: timeout})
	require.NoError(t, err)
	require.Error(t, b.probeOne(context.Background(), backend), "probe of a backend that never answers succeeded")
	select {
	case <-closed:
	case <-time.After(waitLong):
		require.Fail(t, "probe connection not closed", "the probe connection is still open %v after the probe gave up", waitLong)
	}
}

func TestNewRejects(t *testing.T) {
	ok := []string{"10.0.0.1:6443", "10.0.0.2:6443"}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no backends", Config{Listen: "127.0.0.1:7445"}, []string{"no backends"}},
		{"empty backends", Config{Listen: "127.0.0.1:7445", Backends: []string{}}, []string{"no backends"}},
		{"backend without port", Config{Listen: "127.0.0.1:7445", Backends: []string{"10.0.0.2:6443", "10.0.0.1"}}, []string{`"10.0.0.1"`, "missing port"}},
		{"backend with empty port", Config{Listen: "127.0.0.1:7445", Backends: []string{"10.0.0.1:"}}, []string{`"10.0.0.1:"`, "missing port"}},
		{"backend without host", Config{Listen: "127.0.0.1:7445", Backends: []string{":6443"}}, []string{`":6443"`, "missing host"}},
		{"backend port 0", Config{Listen: "127.0.0.1:7445", Backends: []string{"10.0.0.1:0"}}, []string{`"10.0.0.1:0"`}},
		{"backend named port", Config{Listen: "127.0.0.1:7445", Backends: []string{"10.0.0.1:https"}}, []string{`"10.0.0.1:https"`, "not a number"}},
		{"empty backend", Config{Listen: "127.0.0.1:7445", Backends: []string{""}}, []string{`backend ""`}},
		{"duplicate backend", Config{Listen: "127.0.0.1:7445", Backends: []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.1:6443"}}, []string{"10.0.0.1:6443", "duplicate"}},
		{"listen without port", Config{Listen: "127.0.0.1", Backends: ok}, []string{`"127.0.0.1"`, "listen"}},
		{"listen empty", Config{Backends: ok}, []string{"listen address"}},
		{"listen bad port", Config{Listen: "127.0.0.1:99999", Backends: ok}, []string{`"127.0.0.1:99999"`, "listen"}},
		{"listen garbage", Config{Listen: "not an address", Backends: ok}, []string{`"not an address"`}},
		{"negative interval", Config{Listen: "127.0.0.1:7445", Backends: ok, HealthInterval: -time.Second}, []string{"health interval", "-1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.cfg)
			require.Error(t, err, "New(%+v) = %v, want an error", tc.cfg, b)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w, "error %q does not mention %q", err, w)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	b, err := New(Config{
		Listen:   "127.0.0.1:7445",
		Backends: []string{"10.77.0.10:6443", "[fd00::a]:6443", "cp-1.local:6443"},
	})
	require.NoError(t, err)
	assert.Equal(t, DefaultHealthInterval, b.cfg.HealthInterval, "durations %v %v %v, want defaults", b.cfg.HealthInterval, b.cfg.HealthTimeout, b.cfg.DialTimeout)
	assert.Equal(t, DefaultHealthTimeout, b.cfg.HealthTimeout, "durations %v %v %v, want defaults", b.cfg.HealthInterval, b.cfg.HealthTimeout, b.cfg.DialTimeout)
	assert.Equal(t, DefaultDialTimeout, b.cfg.DialTimeout, "durations %v %v %v, want defaults", b.cfg.HealthInterval, b.cfg.HealthTimeout, b.cfg.DialTimeout)
	st := b.Status()
	require.Len(t, st, 3, "Status() = %+v", st)
	require.Equal(t, "[fd00::a]:6443", st[1].Address, "Status() = %+v", st)
	for _, s := range st {
		assert.False(t, s.Healthy, "initial status %+v", s)
		assert.Zero(t, s.ActiveConns, "initial status %+v", s)
		assert.True(t, s.LastChecked.IsZero(), "initial status %+v", s)
	}
	_, err = New(Config{Listen: ":7445", Backends: []string{"10.0.0.1:6443"}})
	assert.NoError(t, err, "listen on all interfaces: %v", err)
}

func TestMain(m *testing.M) {
	// The probe must not go through a proxy whatever the environment says.
	if err := os.Setenv("HTTPS_PROXY", "http://127.0.0.1:1"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
