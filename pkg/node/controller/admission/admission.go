// Package admission is the controller of a control plane's admission of
// the cluster's nodes (kubeadmflow's AdmitNodes: the kubelets' serving
// certificates, the workers' role labels), for as long as the node runs.
package admission

import (
	"context"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
)

// Controller runs the admission.
type Controller struct {
	// Config is the config the node runs now.
	Config func() *machineconfig.Config
	// Admit admits nodes until ctx ends; on a worker, or while the init
	// node's formation still admits, it returns at once.
	Admit func(ctx context.Context, cfg *machineconfig.Config) error
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "node-admission" }

// Reconcile admits with the running config; a look lasts until the node
// stops.
func (c *Controller) Reconcile(ctx context.Context) error {
	return c.Admit(ctx, c.Config())
}
