// Package apilb is the node-local load balancer for the Kubernetes API.
//
// Every Terrarium node runs one (like Talos' KubePrism): kubelet and
// kube-proxy talk to a loopback address such as 127.0.0.1:7445, and the
// balancer forwards each TCP connection to the kube-apiserver of one of the
// control-plane nodes (IP:6443). The cluster forms offline, so this needs no
// DNS name, virtual IP or external load balancer. Forwarding is plain TCP:
// TLS passes through untouched and the balancer holds no credentials.
//
// Backends are probed with an HTTPS GET of /readyz (certificate not
// verified: the probe only checks liveness). New connections go to the
// healthy backend with the fewest active connections. Before the first probe
// round has finished, or while no backend is healthy, a connection goes to
// the first backend that accepts TCP, so the cluster can bootstrap while the
// API is still coming up.
package apilb

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Defaults for the zero values of Config's durations.
const (
	DefaultHealthInterval = 2 * time.Second
	DefaultHealthTimeout  = 2 * time.Second
	DefaultDialTimeout    = 3 * time.Second
)

// probesPerConnection is how many probe rounds share one connection to a
// backend before the next round dials afresh.
const probesPerConnection = 15

// Config of a Balancer.
type Config struct {
	// Listen is the address Serve listens on, e.g. "127.0.0.1:7445".
	Listen string
	// Backends are the kube-apiservers as host:port, e.g.
	// "10.77.0.10:6443"; at least one. Their order is the order tried when
	// no health information is available (from a rotating start).
	Backends []string
	// HealthInterval is the time between probe rounds; zero means
	// DefaultHealthInterval.
	HealthInterval time.Duration
	// HealthTimeout bounds each probe; zero means DefaultHealthTimeout.
	HealthTimeout time.Duration
	// DialTimeout bounds each TCP dial to a backend; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// Log receives state changes and errors; nil discards them.
	Log *slog.Logger
}

// BackendStatus is a snapshot of one backend's state.
type BackendStatus struct {
	// Address is the backend's host:port as configured.
	Address string
	// Healthy is true if the last probe got 200 from /readyz.
	Healthy bool
	// LastError is the last probe's error, empty if it succeeded or no
	// probe has finished yet.
	LastError string
	// LastChecked is when the last probe finished; zero if none has.
	LastChecked time.Time
	// ActiveConns counts the client connections proxied to (or being
	// dialled to) this backend.
	ActiveConns int
}

// Balancer forwards TCP connections to Kubernetes API servers. Create it
// with New and run it with Serve or ServeListener. Its methods are safe for
// concurrent use, but Serve and ServeListener should not run more than once
// at a time.
type Balancer struct {
	cfg   Config
	log   *slog.Logger
	probe *http.Client

	mu          sync.Mutex
	backends    []*backend
	probed      bool // a probe round has finished since Serve started
	next        int  // rotating start for ties and the fallback order
	unreachable bool // the last connection found no backend accepting
}

type backend struct {
	addr string

	// guarded by Balancer.mu
	checked     bool // a probe has finished: healthy is meaningful
	healthy     bool
	lastErr     string
	lastChecked time.Time
	active      int
}

// New validates cfg and returns a Balancer for it. Listen and every backend
// must be host:port with a numeric port (the listen host may be empty, and
// its port 0); backends must not repeat.
func New(cfg Config) (*Balancer, error) {
	if err := checkAddr(cfg.Listen, true); err != nil {
		return nil, fmt.Errorf("listen address %q: %w", cfg.Listen, err)
	}
	if len(cfg.Backends) == 0 {
		return nil, errors.New("no backends: need at least one API server address")
	}
	seen := make(map[string]bool, len(cfg.Backends))
	b := &Balancer{}
	for _, addr := range cfg.Backends {
		if err := checkAddr(addr, false); err != nil {
			return nil, fmt.Errorf("backend %q: %w", addr, err)
		}
		host, port, _ := net.SplitHostPort(addr)
		key := net.JoinHostPort(host, port)
		if seen[key] {
			return nil, fmt.Errorf("backend %q: duplicate, listed more than once", addr)
		}
		seen[key] = true
		b.backends = append(b.backends, &backend{addr: addr})
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"health interval", &cfg.HealthInterval, DefaultHealthInterval},
		{"health timeout", &cfg.HealthTimeout, DefaultHealthTimeout},
		{"dial timeout", &cfg.DialTimeout, DefaultDialTimeout},
	} {
		switch {
		case *d.v < 0:
			return nil, fmt.Errorf("%s %v: must not be negative", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	cfg.Backends = slices.Clone(cfg.Backends)
	b.cfg = cfg
	b.log = cfg.Log
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.probe = &http.Client{
		Transport: &http.Transport{
			Proxy:       nil, // the API servers are always reached directly
			DialContext: (&net.Dialer{Timeout: cfg.HealthTimeout}).DialContext,
			// net/http finishes a dial in the background when the probe's
			// context ends; without this bound a backend that accepts but
			// never completes the handshake would hold that goroutine and
			// its socket for good, one more every probe.
			TLSHandshakeTimeout: cfg.HealthTimeout,
			// The probe checks liveness only and sends no credentials, and
			// the balancer holds no cluster CA: don't verify.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec
			// One connection per backend, kept between probes: a TLS
			// handshake every two seconds from every node to every
			// API server was the balancer's main cost under TCG
			// (docs/benchmarks.md). healthLoop drops it now and then, so
			// that a probe also checks the server still accepts.
			MaxIdleConnsPerHost: 1,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return b, nil
}

// checkAddr checks addr is host:port with a numeric port. A listen address
// may have an empty host (all interfaces) and port 0 (any).
func checkAddr(addr string, listen bool) error {
	if addr == "" {
		return errors.New("empty, want host:port")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" && !listen {
		return errors.New("missing host")
	}
	if port == "" {
		return errors.New("missing port")
	}
	lowest := uint64(1)
	if listen {
		lowest = 0
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n < lowest {
		return fmt.Errorf("port %q is not a number from %d to 65535", port, lowest)
	}
	return nil
}

// Serve listens on the configured address, probes the backends and forwards
// connections until ctx is done. It then closes the listener and every
// proxied connection, waits for its goroutines and returns nil. It returns
// an error if it cannot listen or accepting fails for good.
func (b *Balancer) Serve(ctx context.Context) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", b.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", b.cfg.Listen, err)
	}
	return b.ServeListener(ctx, l)
}

// ServeListener is Serve on a listener the caller made (a test's, or one
// passed by socket activation). It closes l before returning.
func (b *Balancer) ServeListener(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait() // runs last: after cancel has stopped everything
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = l.Close() }) // unblocks Accept
	defer stop()
	defer l.Close()

	b.mu.Lock()
	b.probed = false // health from an earlier run is stale
	b.mu.Unlock()
	b.log.Info("API load balancer serving", "listen", l.Addr().String(), "backends", b.cfg.Backends)
	wg.Go(func() { b.healthLoop(ctx) })

	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				b.log.Info("API load balancer stopping", "listen", l.Addr().String())
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept on %s: %w", l.Addr(), err)
			}
			// Transient (out of file descriptors, aborted handshake...):
			// back off like net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			b.log.Warn("accept failed, retrying", "listen", l.Addr().String(), "error", err, "in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		wg.Go(func() { b.handle(ctx, c) })
	}
}

// Status returns a snapshot of the backends' states, in configured order.
func (b *Balancer) Status() []BackendStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]BackendStatus, len(b.backends))
	for i, be := range b.backends {
		out[i] = BackendStatus{
			Address:     be.addr,
			Healthy:     be.healthy,
			LastError:   be.lastErr,
			LastChecked: be.lastChecked,
			ActiveConns: be.active,
		}
	}
	return out
}

// healthLoop probes all backends now and then every HealthInterval until ctx
// is done.
func (b *Balancer) healthLoop(ctx context.Context) {
	t := time.NewTicker(b.cfg.HealthInterval)
	defer t.Stop()
	for round := 1; ; round++ {
		if round%probesPerConnection == 0 {
			b.probe.CloseIdleConnections()
		}
		b.probeRound(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeRound probes every backend concurrently, records each result as it
// comes, and marks the balancer probed once all are in.
func (b *Balancer) probeRound(ctx context.Context) {
	var wg sync.WaitGroup
	for _, be := range b.backends {
		wg.Go(func() {
			err := b.probeOne(ctx, be.addr)
			if ctx.Err() != nil {
				return // shutting down: the error says nothing of the backend
			}
			b.record(be, err)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	b.mu.Lock()
	b.probed = true
	b.mu.Unlock()
}

// probeOne GETs https://addr/readyz and wants 200 within HealthTimeout.
func (b *Balancer) probeOne(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.HealthTimeout)
	defer cancel()
	url := "https://" + addr + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", url, err)
	}
	resp, err := b.probe.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe GET %s: status %s", url, resp.Status)
	}
	return nil
}

// record stores a probe result and logs a change of state.
func (b *Balancer) record(be *backend, err error) {
	b.mu.Lock()
	was, known := be.healthy, be.checked
	be.checked = true
	be.healthy = err == nil
	be.lastErr = ""
	if err != nil {
		be.lastErr = err.Error()
	}
	be.lastChecked = time.Now()
	b.mu.Unlock()

	switch {
	case known && was == (err == nil):
	case err == nil:
		b.log.Info("API server backend healthy", "backend", be.addr)
	default:
		b.log.Warn("API server backend unhealthy", "backend", be.addr, "error", err)
	}
}

// candidates returns the backends in the order a new connection should try
// them, and counts the connection as active on the first. Before the first
// probe round, or when none is healthy, that is all backends from a
// rotating start. Otherwise it is the healthy ones by fewest active
// connections (ties in rotating order), then the others as a fallback.
func (b *Balancer) candidates() []*backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.backends)
	start := b.next % n
	b.next = (start + 1) % n
	order := make([]*backend, 0, n)
	order = append(order, b.backends[start:]...)
	order = append(order, b.backends[:start]...)

	if b.probed && slices.ContainsFunc(order, func(be *backend) bool { return be.healthy }) {
		slices.SortStableFunc(order, func(x, y *backend) int {
			switch {
			case x.healthy != y.healthy:
				if x.healthy {
					return -1
				}
				return 1
			case x.healthy:
				return x.active - y.active
			}
			return 0
		})
	}
	order[0].active++
	return order
}

// release counts one connection less on be.
func (b *Balancer) release(be *backend) {
	b.mu.Lock()
	be.active--
	b.mu.Unlock()
}

// dial connects to the first candidate that accepts within DialTimeout. The
// connection is counted as active on the returned backend.
func (b *Balancer) dial(ctx context.Context) (*backend, net.Conn, error) {
	d := net.Dialer{Timeout: b.cfg.DialTimeout}
	var errs []error
	for i, be := range b.candidates() {
		if i > 0 {
			b.mu.Lock()
			be.active++
			b.mu.Unlock()
		}
		c, err := d.DialContext(ctx, "tcp", be.addr)
		if err == nil {
			return be, c, nil
		}
		b.release(be)
		b.log.Debug("backend refused connection", "backend", be.addr, "error", err)
		errs = append(errs, err) // a *net.OpError: names the dial and address
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, errors.Join(errs...)
}

// handle proxies one client connection until either side is done or ctx is.
func (b *Balancer) handle(ctx context.Context, client net.Conn) {
	defer client.Close()
	stopClient := context.AfterFunc(ctx, func() { _ = client.Close() })
	defer stopClient()

	be, upstream, err := b.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		b.mu.Lock()
		first := !b.unreachable
		b.unreachable = true
		b.mu.Unlock()
		if first {
			b.log.Warn("no API server backend accepts connections; closing clients until one does",
				"client", client.RemoteAddr().String(), "error", err)
		}
		return
	}
	defer b.release(be)
	defer upstream.Close()
	stopUpstream := context.AfterFunc(ctx, func() { _ = upstream.Close() })
	defer stopUpstream()

	b.mu.Lock()
	recovered := b.unreachable
	b.unreachable = false
	b.mu.Unlock()
	if recovered {
		b.log.Info("API server backend accepts connections again", "backend", be.addr)
	}
	b.log.Debug("proxying", "client", client.RemoteAddr().String(), "backend", be.addr)
	pipe(client, upstream)
}

// pipe copies both ways between a and c. When one direction ends cleanly
// the write side of its destination is shut (half-close) and the other
// direction goes on; when one fails both connections are closed.
func pipe(a, c net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := io.Copy(c, a)
		finish(c, a, err)
	}()
	_, err := io.Copy(a, c)
	finish(a, c, err)
	<-done
}

// finish ends a copy from src to dst that returned err.
func finish(dst, src net.Conn, err error) {
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	_ = dst.Close() // the copy is over either way
	_ = src.Close()
}
