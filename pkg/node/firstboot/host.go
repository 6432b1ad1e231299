package firstboot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/nodestate"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"

	"github.com/terrarium-os/terrarium/pkg/node/cri"
	"github.com/terrarium-os/terrarium/pkg/node/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/leaselock"
)

// Host is the machine firstboot acts on. Production uses the real root;
// tests point Root at a temporary directory and Exec at a fake.
type Host struct {
	// Root prefixes every file path.
	Root string
	// Exec runs a program and returns its combined output.
	Exec func(ctx context.Context, name string, args ...string) ([]byte, error)
	// State is the node's persisted state (the kubeadm progress is kept
	// there); firstboot's runner sets it.
	State *nodestate.Store
	// Progress, if set, hears about long steps as they start and end
	// (firstboot records them in the journal and on the console).
	Progress func(step, result, detail string)
	// Cluster, if set, receives what a phase learns about the cluster.
	Cluster func(update func(*ClusterStatus))
	// RetryDelay is the pause between attempts of a failed cluster step
	// and between polls; 0 means the defaults (seconds).
	RetryDelay time.Duration
	// StepAttempts is how often a failing cluster step is tried; 0 means 3.
	StepAttempts int
	// Probe asks an HTTPS endpoint, verified by the PEM CA, for its status
	// code; nil means a real HTTPS GET (tests fake it).
	Probe func(ctx context.Context, url, caPEM string) (int, error)
	// KubeClient returns a client of the API with the credentials of a
	// kubeconfig file; nil means a real client (pkg/node/kubeclient), with the
	// kubeconfig and the files it names read under Root.
	KubeClient func(kubeconfig string) (APIClient, error)
	// Now is the node's one clock (firstboot's runner and every phase
	// read it); nil means time.Now.
	Now func() time.Time
	// Runtime is the container runtime, asked over the CRI; RealHost
	// sets the real one (pkg/node/cri), tests a fake.
	Runtime ContainerRuntime
}

// ContainerRuntime is what firstboot asks the container runtime at a CRI
// endpoint.
type ContainerRuntime interface {
	// Check reports whether it is ready for the kubelet.
	Check(ctx context.Context, endpoint string) (cri.Info, error)
	// Pull makes an image present and reports whether it pulled it.
	Pull(ctx context.Context, endpoint, ref string) (bool, error)
	// Running reports whether a container the kubelet created under a
	// name (the pod spec's) runs.
	Running(ctx context.Context, endpoint, name string) (bool, error)
}

// criRuntime is the real container runtime: one CRI client per question.
type criRuntime struct{}

var _ ContainerRuntime = criRuntime{}

func (criRuntime) Check(ctx context.Context, endpoint string) (cri.Info, error) {
	return cri.Check(ctx, endpoint)
}

func (criRuntime) Pull(ctx context.Context, endpoint, ref string) (pulled bool, err error) {
	err = withCRI(endpoint, func(c *cri.Client) (err error) {
		pulled, err = c.Pull(ctx, ref)
		return err
	})
	return pulled, err
}

func (criRuntime) Running(ctx context.Context, endpoint, name string) (running bool, err error) {
	err = withCRI(endpoint, func(c *cri.Client) (err error) {
		running, err = c.Running(ctx, name)
		return err
	})
	return running, err
}

// withCRI runs fn with a client of the runtime at endpoint, closed after.
func withCRI(endpoint string, fn func(*cri.Client) error) error {
	c, err := cri.New(endpoint)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

func (h *Host) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// prober returns a function that GETs a URL over HTTPS, trusting only
// caPEM, and returns the status; done drops its connections. One prober
// keeps its connection alive across polls: under emulation a TLS handshake
// with a loaded API server costs it tens of milliseconds of CPU each time.
func (h *Host) prober(caPEM string) (probe func(ctx context.Context, url string) (int, error), done func()) {
	if h.Probe != nil {
		return func(ctx context.Context, url string) (int, error) { return h.Probe(ctx, url, caPEM) }, func() {}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return func(_ context.Context, url string) (int, error) {
			return 0, fmt.Errorf("no CA certificate to verify %s with", url)
		}, func() {}
	}
	// Generous: under emulation (TCG) a loaded API server takes seconds
	// for a TLS handshake; the caller's deadline bounds the wait anyway.
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return func(ctx context.Context, url string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		// Drained, so that the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return resp.StatusCode, nil
	}, c.CloseIdleConnections
}

// NodeReader reads the API's nodes (pkg/node/kubeclient.Client).
type NodeReader interface {
	Nodes(ctx context.Context) ([]kubeclient.Node, error)
	Node(ctx context.Context, name string) (kubeclient.Node, error)
}

// APIClient is what firstboot asks of the API: node readiness, and the
// Lease of the control planes' join lock.
type APIClient interface {
	NodeReader
	leaselock.Store
}

var _ APIClient = (*kubeclient.Client)(nil)

func (h *Host) kubeClient(kubeconfig string) (APIClient, error) {
	if h.KubeClient != nil {
		return h.KubeClient(kubeconfig)
	}
	b, err := os.ReadFile(h.Path(kubeconfig))
	if err != nil {
		return nil, err
	}
	c, err := kubeclient.New(b, func(p string) ([]byte, error) { return os.ReadFile(h.Path(p)) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kubeconfig, err)
	}
	return c, nil
}

func (h *Host) attempts() int {
	if h.StepAttempts > 0 {
		return h.StepAttempts
	}
	return stepAttempts
}

func (h *Host) delay(def time.Duration) time.Duration {
	if h.RetryDelay > 0 {
		return h.RetryDelay
	}
	return def
}

func (h *Host) progress(step, result, detail string) {
	if h.Progress != nil {
		h.Progress(step, result, detail)
	}
}

func (h *Host) cluster(update func(*ClusterStatus)) {
	if h.Cluster != nil {
		h.Cluster(update)
	}
}

// output runs a program and returns its output, failing with the output
// in the error.
func (h *Host) output(ctx context.Context, name string, args ...string) (string, error) {
	out, err := h.Exec(ctx, name, args...)
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLines(string(out), 15))
	}
	return string(out), nil
}

// lastLines keeps the end of a long command output for an error message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RealHost acts on this machine.
func RealHost() *Host {
	return &Host{Root: "/", Now: time.Now, Runtime: criRuntime{}, Exec: func(ctx context.Context, name string, args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, name, args...).CombinedOutput()
	}}
}

// Path maps an absolute path onto the host root.
func (h *Host) Path(p string) string { return filepath.Join(h.Root, p) }

func (h *Host) run(ctx context.Context, name string, args ...string) error {
	out, err := h.Exec(ctx, name, args...)
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeIfChanged writes a file only when its content differs; it reports
// whether it wrote.
func (h *Host) writeIfChanged(p string, data []byte, mode os.FileMode) (bool, error) {
	full := h.Path(p)
	if old, err := os.ReadFile(full); err == nil && string(old) == string(data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return false, err
	}
	// WriteFile sets the mode itself, whatever the umask.
	if err := atomicfile.WriteFile(full, data, mode); err != nil {
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	return true, nil
}
