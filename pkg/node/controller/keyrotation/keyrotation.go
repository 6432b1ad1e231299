// Package keyrotation is the controller of a control plane's part in
// moving the cluster to its current secrets encryption key
// (pkg/node/kube/secretskeys): after a rotation, and once on a new
// cluster, where the Secrets stored before the key are written again. A
// settled control plane asks the API rarely (SettledEvery).
package keyrotation

import (
	"context"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/secretskeys"
)

// SettledEvery is how often a settled control plane looks again (a
// control plane joined, a record restored from a backup).
const SettledEvery = 2 * time.Minute

// Rotator makes one pass of the rotation for node (secretskeys.Rotator).
type Rotator interface {
	Pass(ctx context.Context, node string, c *machineconfig.Cluster) (secretskeys.Result, error)
}

// Locker is the node's change lock (a sync.Mutex): held by whatever
// changes the node — an upgrade or a config change, which restart
// kube-apiserver and rewrite its files themselves.
type Locker interface {
	TryLock() bool
	Unlock()
}

// Controller runs the passes.
type Controller struct {
	Host *host.Host
	// Config is the config the node runs now.
	Config  func() *machineconfig.Config
	Changes Locker
	// AdminKubeconfig is the admin's kubeconfig, a path on Host: kubeadm
	// writes it when the control plane has formed or joined.
	AdminKubeconfig string
	// NewRotator makes this control plane's Rotator, at its first pass.
	NewRotator func(cfg *machineconfig.Config) (Rotator, error)

	rot Rotator
	// settled is the config the last pass found settled (nil: none),
	// and next when it looks again all the same.
	settled *machineconfig.Config
	next    time.Time
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "secrets-keys" }

// Reconcile makes a pass on a formed control plane whose config has a
// secrets encryption key, unless a change of the node is under way or the
// last pass found it settled less than SettledEvery ago.
func (c *Controller) Reconcile(ctx context.Context) error {
	cfg := c.Config()
	if cfg == nil || cfg.Cluster == nil || !cfg.Cluster.IsControlPlane() || cfg.Cluster.SecretsEncryptionKey == "" {
		return nil
	}
	now := c.Host.Now()
	if cfg == c.settled && now.Before(c.next) {
		return nil
	}
	if _, err := os.Stat(c.Host.Path(c.AdminKubeconfig)); err != nil {
		return nil // not formed yet
	}
	if !c.Changes.TryLock() {
		return nil
	}
	defer c.Changes.Unlock()
	if c.rot == nil {
		rot, err := c.NewRotator(cfg)
		if err != nil {
			return err
		}
		c.rot = rot
	}
	res, err := c.rot.Pass(ctx, cfg.Hostname, cfg.Cluster)
	c.settled = nil
	if err == nil && res.Settled {
		c.settled, c.next = cfg, now.Add(SettledEvery)
	}
	return err
}
