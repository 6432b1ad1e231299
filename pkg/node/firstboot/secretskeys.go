package firstboot

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/images/cri"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/secretskeys"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// secretsKeys is a control plane's part in moving the cluster to its
// current secrets encryption key (pkg/node/kube/secretskeys): after a
// rotation, and once on a new cluster, where it writes again the Secrets
// stored before the key.
type secretsKeys struct {
	r   *runner
	rot *secretskeys.Rotator
	// settled is the config the last look found settled (nil: none),
	// and next when it looks again all the same: a settled control plane
	// asks the API rarely.
	settled *machineconfig.Config
	next    time.Time
}

// settledEvery is how often a settled control plane looks again (a
// control plane joined, a record restored from a backup).
const settledEvery = 2 * time.Minute

func (c *secretsKeys) Name() string { return "secrets-keys" }

// secretsAPI is what the rotation asks of the admin's client, and of its
// own API server's.
type secretsAPI interface {
	secretskeys.API
	At(hostport string) *kubeclient.Client
}

var _ secretsAPI = (*kubeclient.Client)(nil)

func (c *secretsKeys) Reconcile(ctx context.Context) error {
	cfg := c.r.cfg.get()
	if cfg == nil || cfg.Cluster == nil || !cfg.Cluster.IsControlPlane() || cfg.Cluster.SecretsEncryptionKey == "" {
		return nil
	}
	now := c.r.o.Host.Now()
	if cfg == c.settled && now.Before(c.next) {
		return nil
	}
	// Formed: kubeadm wrote the admin's kubeconfig.
	if _, err := os.Stat(c.r.o.Host.Path(kubeadmflow.AdminKubeconfig)); err != nil {
		return nil
	}
	// Not beside an upgrade or a config change, which restart
	// kube-apiserver and rewrite its files themselves.
	if !c.r.changing.TryLock() {
		return nil
	}
	defer c.r.changing.Unlock()
	if c.rot == nil {
		rot, err := c.rotator(cfg)
		if err != nil {
			return err
		}
		c.rot = rot
	}
	c.rot.Node = cfg.Hostname
	res, err := c.rot.Pass(ctx, cfg.Cluster)
	c.settled = nil
	if err == nil && res.Settled {
		c.settled, c.next = cfg, now.Add(settledEvery)
	}
	return err
}

// rotator is the Rotator of this control plane, as the cluster's admin.
func (c *secretsKeys) rotator(cfg *machineconfig.Config) (*secretskeys.Rotator, error) {
	client, err := c.r.o.Cluster.API(kubeadmflow.AdminKubeconfig)
	if err != nil {
		return nil, err
	}
	api, ok := client.(secretsAPI)
	if !ok {
		return nil, errors.New("this API client cannot rotate the secrets encryption key")
	}
	ip, err := netip.ParseAddr(cfg.Cluster.NodeIP)
	if err != nil {
		return nil, fmt.Errorf("cluster.nodeIP: %w", err)
	}
	return &secretskeys.Rotator{
		Node:    cfg.Hostname,
		Root:    c.r.o.Host.Root,
		API:     api,
		Local:   api.At(netip.AddrPortFrom(ip, machineconfig.APIServerPort).String()),
		Runtime: criContainers{endpoint: kubeadmconfig.CRISocket},
		Report: func(result step.Result, detail string) {
			c.r.report(secretskeys.Step, result, detail)
		},
		Log: c.r.o.Log.With("controller", "secrets-keys"),
	}, nil
}

// criContainers is secretskeys.Runtime over the CRI, one connection per
// question.
type criContainers struct{ endpoint string }

func (r criContainers) Created(ctx context.Context, name string) (t time.Time, err error) {
	err = r.with(func(c *cri.Client) error {
		t, err = c.Created(ctx, name)
		return err
	})
	return t, err
}

func (r criContainers) Stop(ctx context.Context, name string, timeout time.Duration) error {
	return r.with(func(c *cri.Client) error { return c.Stop(ctx, name, timeout) })
}

func (r criContainers) with(fn func(*cri.Client) error) error {
	c, err := cri.New(r.endpoint)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}
