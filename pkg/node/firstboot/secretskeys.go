package firstboot

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/controller/keyrotation"
	"github.com/terrarium-os/terrarium/pkg/node/images/cri"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/secretskeys"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// secretsAPI is what the rotation asks of the admin's client, and of its
// own API server's.
type secretsAPI interface {
	secretskeys.API
	At(hostport string) *kubeclient.Client
}

var _ secretsAPI = (*kubeclient.Client)(nil)

// nodeRotator is a secretskeys.Rotator as the keyrotation controller
// drives it: each pass for the node's current name.
type nodeRotator struct{ *secretskeys.Rotator }

func (r nodeRotator) Pass(ctx context.Context, node string, c *machineconfig.Cluster) (secretskeys.Result, error) {
	r.Node = node
	return r.Rotator.Pass(ctx, c)
}

// newRotator is the Rotator of this control plane, as the cluster's admin.
func (r *runner) newRotator(cfg *machineconfig.Config) (keyrotation.Rotator, error) {
	client, err := r.o.Cluster.API(kubeadmflow.AdminKubeconfig)
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
	return nodeRotator{&secretskeys.Rotator{
		Node:    cfg.Hostname,
		Root:    r.o.Host.Root,
		API:     api,
		Local:   api.At(netip.AddrPortFrom(ip, machineconfig.APIServerPort).String()),
		Runtime: criContainers{endpoint: kubeadmconfig.CRISocket},
		Report: func(result step.Result, detail string) {
			r.report(secretskeys.Step, result, detail)
		},
		Log: r.o.Log.With("controller", "secrets-keys"),
	}}, nil
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
