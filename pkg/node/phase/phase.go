// Package phase is the shape of one step of bringing a node to what its
// machine config says, the way kubeadm's phases are values: a name, an
// apply that is idempotent (it checks before it acts, so a rerun after a
// power cut is safe) and a verify that only looks. Each phase is runnable
// alone (`firstboot run --phase NAME`).
package phase

import (
	"context"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Func applies or verifies a phase for a config.
type Func func(ctx context.Context, c *machineconfig.Config) error

// Phase is one provisioning step.
type Phase struct {
	Name   string
	Apply  Func
	Verify Func
	// Waits marks a phase whose Apply waits for the node to reach a
	// state on its own (a kubelet's node becoming Ready) rather than
	// writing it. On a boot after the first its Verify failing is not
	// drift: the node has not got there yet, and Apply waits for it.
	Waits bool
}

// On binds a function of a host into a Func.
func On(h *host.Host, f func(ctx context.Context, h *host.Host, c *machineconfig.Config) error) Func {
	return func(ctx context.Context, c *machineconfig.Config) error { return f(ctx, h, c) }
}

// Names lists the names of phases, in order.
func Names(ps []Phase) []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}
