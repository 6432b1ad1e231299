// Package kubeadmflow forms or joins a node's Kubernetes cluster with
// kubeadm, offline: the host files and PKI a cluster node needs, the
// rendered kubeadm configuration, and kubeadm's phases run one by one with
// their progress kept in the node state, so a power cut resumes where it
// stopped. Its waits ask the container runtime, the API and the kubelet's
// files, and report what they wait for.
package kubeadmflow

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/cri"
	"github.com/terrarium-os/terrarium/pkg/node/kube/csrsigner"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/leaselock"
	"github.com/terrarium-os/terrarium/pkg/node/kube/localvolumes"
	"github.com/terrarium-os/terrarium/pkg/node/kube/volumebackup"
)

// Flow is a cluster node's formation on a host. New builds it; every
// field is required.
type Flow struct {
	*host.Host
	Deps
	// State is the node's persisted state: the kubeadm progress is kept
	// there.
	State *nodestate.Store
	// Report hears about long steps as they start, wait and end.
	Report host.Reporter
	// Cluster receives what a phase learns about the cluster.
	Cluster func(update func(*ClusterStatus))
	// kubernetesRoot: KubernetesRoot.
	kubernetesRoot atomic.Pointer[string]
	// admitting is set while AdmitNodes runs.
	admitting atomic.Bool
}

// KubernetesRoot is where the slot whose Kubernetes the node runs is
// mounted: "" the booted slot's root, or layout.InPlaceSlotDir once the
// node runs a staged slot's Kubernetes in place (package inplace). That
// slot's bundle names the Kubernetes the node is to run.
func (f *Flow) KubernetesRoot() string {
	if p := f.kubernetesRoot.Load(); p != nil {
		return *p
	}
	return ""
}

// SetKubernetesRoot sets KubernetesRoot.
func (f *Flow) SetKubernetesRoot(root string) { f.kubernetesRoot.Store(&root) }

// Deps are what the flow asks beyond the host: the container runtime, the
// API, and how long it waits. Real gives the production ones.
type Deps struct {
	Runtime ContainerRuntime
	// API returns a client of the API with the credentials of a
	// kubeconfig file.
	API func(kubeconfig string) (APIClient, error)
	// Probe returns a function that GETs a URL over HTTPS, trusting only
	// the PEM CA, and returns the status code and body; done drops its
	// connections.
	Probe func(caPEM string) (probe ProbeFunc, done func())
	// Backups offers a new init node the backup it restores the cluster
	// from (a TERRA-BACKUP stick: etcdbackup.FromStick).
	Backups etcdbackup.Source
	// APIVersion asks the API server at endpoint (host:port) for its
	// Kubernetes version, with the credentials of a kubeconfig file.
	APIVersion func(ctx context.Context, kubeconfig, endpoint string) (string, error)
	// KubeletCSRs, when set, approves and signs kubelets' client
	// certificate requests, and their serving certificate requests for
	// their nodes' own names and addresses, as the admin of kubeconfig
	// with the cluster CA in pkiDir until ctx ends, watching for them
	// (csrsigner): the init node runs it while the cluster forms, before
	// its controller manager signs.
	KubeletCSRs func(ctx context.Context, kubeconfig, pkiDir string) error
	// Admission, when set, is a control plane's admission of the
	// cluster's nodes until ctx ends, as the admin of kubeconfig with the
	// cluster CA in pkiDir: every so often each pending kubelet
	// certificate request decided as KubeletCSRs does, and each worker
	// labelled (noderole; controlPlanes are the control planes'
	// addresses). See AdmitNodes.
	Admission func(ctx context.Context, kubeconfig, pkiDir string, controlPlanes []string) error
	// Volumes keeps the node's volume area (localvolumes.Area).
	Volumes VolumeArea
	// VolumeBackups offers a new node the volume backups it restores its
	// volumes from (a TERRA-BACKUP stick: volumebackup.FromStick).
	VolumeBackups volumebackup.Source
	Timing        Timing
}

// VolumeArea is the node's volume area for the local-path StorageClass:
// Ensure makes it as the spec says (a file on TERRA-STATE, or a whole
// disk) and mounts it, Check only looks.
type VolumeArea interface {
	Ensure(ctx context.Context, spec localvolumes.Spec) (localvolumes.Result, error)
	Check() error
}

// ProbeFunc asks an HTTPS endpoint for its status code and body (up to
// probeBodyLimit).
type ProbeFunc func(ctx context.Context, url string) (code int, body []byte, err error)

// probeBodyLimit is as much of an answer as a probe reads: a readyz
// verdict, or the cluster-info ConfigMap.
const probeBodyLimit = 64 << 10

// Timing is how often the flow asks and retries.
type Timing struct {
	// APIPoll is the pause between two questions to the API (readyz,
	// the nodes, the join lock).
	APIPoll time.Duration
	// FilePoll is the pause between two looks for a file or at the
	// container runtime.
	FilePoll time.Duration
	// StepRetry is the pause before a failed step is tried again.
	StepRetry time.Duration
	// StepAttempts is how often a failing step is tried.
	StepAttempts int
}

// defaultAPIPoll: one request on a kept-alive connection, or one TLS
// handshake, costs the API server milliseconds even under emulation, and
// every poll saved is a node up sooner.
const defaultAPIPoll = 2 * time.Second

// diagnosticsEveryPolls: long waits for the API show diagnostics every
// diagnosticsEvery at the production poll interval.
const diagnosticsEveryPolls = int(diagnosticsEvery / defaultAPIPoll)

// DefaultTiming is the production timing.
func DefaultTiming() Timing {
	return Timing{APIPoll: defaultAPIPoll, FilePoll: time.Second, StepRetry: 15 * time.Second, StepAttempts: 3}
}

// Real are the production dependencies on h: containerd over the CRI, the
// API through the kubeconfig files under h's root, HTTPS probes.
func Real(h *host.Host) Deps {
	client := func(kubeconfig string) (*kubeclient.Client, error) {
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
	return Deps{
		Runtime: CRIRuntime{},
		API:     func(kubeconfig string) (APIClient, error) { return client(kubeconfig) },
		APIVersion: func(ctx context.Context, kubeconfig, endpoint string) (string, error) {
			c, err := client(kubeconfig)
			if err != nil {
				return "", err
			}
			at := c.At(endpoint)
			defer at.CloseIdleConnections()
			return at.Version(ctx)
		},
		Probe: HTTPSProbe,
		KubeletCSRs: func(ctx context.Context, kubeconfig, pkiDir string) error {
			err := signKubeletCSRs(ctx, h, client, kubeconfig, pkiDir)
			if err != nil && ctx.Err() == nil {
				slog.Warn("kubelet certificates: not signed by this node; the controller manager signs client certificates, and serving certificates wait for the next admission", "err", err)
			}
			return err
		},
		Admission: func(ctx context.Context, kubeconfig, pkiDir string, controlPlanes []string) error {
			return admitNodes(ctx, h, client, kubeconfig, pkiDir, controlPlanes)
		},
		Volumes: &localvolumes.Area{Host: h, Say: func(format string, args ...any) {
			slog.Info(fmt.Sprintf(format, args...))
		}},
		Timing: DefaultTiming(),
	}
}

// signKubeletCSRs runs a csrsigner.Signer as the admin of kubeconfig with
// the cluster CA in pkiDir until ctx ends.
func signKubeletCSRs(ctx context.Context, h *host.Host, client func(string) (*kubeclient.Client, error), kubeconfig, pkiDir string) error {
	c, err := client(kubeconfig)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	s, err := newSigner(h, c, pkiDir)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// newSigner is a csrsigner.Signer asking api, with the cluster CA in
// pkiDir.
func newSigner(h *host.Host, api csrsigner.API, pkiDir string) (*csrsigner.Signer, error) {
	certPEM, err := os.ReadFile(h.Path(pkiDir + "/ca.crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(h.Path(pkiDir + "/ca.key"))
	if err != nil {
		return nil, err
	}
	ca, key, err := csrsigner.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkiDir, err)
	}
	return &csrsigner.Signer{API: api, CA: ca, Key: key, Now: h.Now, Log: slog.Default(), Retry: defaultAPIPoll}, nil
}

// New builds a flow, refusing a missing dependency.
func New(h *host.Host, d Deps, state *nodestate.Store, report host.Reporter, cluster func(update func(*ClusterStatus))) (*Flow, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"host": h != nil, "runtime": d.Runtime != nil, "API": d.API != nil, "API version": d.APIVersion != nil,
		"probe": d.Probe != nil, "backups": d.Backups != nil, "volumes": d.Volumes != nil, "volume backups": d.VolumeBackups != nil,
		"state": state != nil, "reporter": report != nil, "cluster status": cluster != nil,
		"timing": d.Timing.StepAttempts > 0 && d.Timing.APIPoll > 0 && d.Timing.FilePoll > 0,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kubeadm flow: missing %v", missing)
	}
	return &Flow{Host: h, Deps: d, State: state, Report: report, Cluster: cluster}, nil
}

// ClusterStatus is what the banner and `firstboot status` say about the
// node's cluster.
type ClusterStatus struct {
	Role string `json:"role"`
	// Step is the provisioning step in progress, or the last one done.
	Step string `json:"step,omitempty"`
	// APIUp says the API answered through the node's balancer.
	APIUp bool `json:"apiUp"`
	// Nodes is what the API last said: "<ready>/<total> nodes Ready" on a
	// control plane, "this node Ready" on a worker, which may read only
	// its own Node.
	Nodes string `json:"nodes,omitempty"`
	// NodesAt is when the API said it: the count is not refreshed once
	// the node is provisioned.
	NodesAt time.Time `json:"nodesAt,omitzero"`
	// AdminKubeconfig is where the admin kubeconfig is (init node).
	AdminKubeconfig string `json:"adminKubeconfig,omitempty"`
}

// ContainerRuntime is what the flow asks the container runtime at a CRI
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

// CRIRuntime is the real container runtime: one CRI client per question.
type CRIRuntime struct{}

var _ ContainerRuntime = CRIRuntime{}

// Check asks the runtime's status.
func (CRIRuntime) Check(ctx context.Context, endpoint string) (cri.Info, error) {
	return cri.Check(ctx, endpoint)
}

// Pull pulls ref unless it is present.
func (CRIRuntime) Pull(ctx context.Context, endpoint, ref string) (pulled bool, err error) {
	err = withCRI(endpoint, func(c *cri.Client) (err error) {
		pulled, err = c.Pull(ctx, ref)
		return err
	})
	return pulled, err
}

// Running reports whether a container named name runs.
func (CRIRuntime) Running(ctx context.Context, endpoint, name string) (running bool, err error) {
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

// NodeReader reads the API's nodes (pkg/node/kube/kubeclient.Client).
type NodeReader interface {
	Nodes(ctx context.Context) ([]kubeclient.Node, error)
	Node(ctx context.Context, name string) (kubeclient.Node, error)
}

// ManifestApplier applies a manifest's objects with server-side apply
// (pkg/node/kube/kubeclient.Client).
type ManifestApplier interface {
	ApplyManifest(ctx context.Context, manifest []byte, fieldManager string) error
}

// ConfigMapReader reads a ConfigMap (pkg/node/kube/kubeclient.Client).
type ConfigMapReader interface {
	ConfigMap(ctx context.Context, namespace, name string) (kubeclient.ConfigMap, error)
}

// APIClient is what the flow asks of the API: node readiness, the Lease
// of the control planes' join lock, the add-ons' manifests applied, and
// the cluster's kubelet configuration.
type APIClient interface {
	NodeReader
	leaselock.Store
	ManifestApplier
	ConfigMapReader
}

var _ APIClient = (*kubeclient.Client)(nil)

// errNoCA: a probe without a CA to verify the endpoint with.
var errNoCA = errors.New("no CA certificate to verify the endpoint with")

// HTTPSProbe GETs URLs over HTTPS, trusting only caPEM. One prober keeps
// its connection alive across polls: under emulation a TLS handshake with a
// loaded API server costs it tens of milliseconds of CPU each time.
func HTTPSProbe(caPEM string) (probe ProbeFunc, done func()) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return func(_ context.Context, url string) (int, []byte, error) {
			return 0, nil, fmt.Errorf("%s: %w", url, errNoCA)
		}, func() {}
	}
	// Generous: under emulation (TCG) a loaded API server takes seconds
	// for a TLS handshake; the caller's deadline bounds the wait anyway.
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return func(ctx context.Context, url string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, probeBodyLimit))
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", url, err)
		}
		// Drained, so that the connection is reused.
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, body, nil
	}, c.CloseIdleConnections
}

// Admissible reports what makes a valid cluster config unusable on this
// host now, before anything is applied: an image without the Kubernetes
// bundle, or a bootstrap token that expired before it was used (the init
// node creates it in the cluster, the others join with it; afterwards its
// expiry no longer matters). A config without a cluster is admissible.
func (f *Flow) Admissible(c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	if _, err := bundleKubernetesVersion(f.Host, f.KubernetesRoot()); err != nil {
		return fmt.Errorf("cluster: %w; boot an image built with the Kubernetes bundle (bundles/kubernetes-*.yaml in the build spec), or remove cluster: from the config", err)
	}
	if tokenUsed(f, cl.Role) {
		return nil
	}
	return cl.CheckToken(f.Now())
}
