// Package upgradestick is the controller that installs the upgrade file
// on each TERRA-UPGRADE stick inserted into a running node, once per
// insertion, as every upgrade is installed (its signature and every part
// checked before a byte is written; on a node of a cluster, handed to the
// cluster's rollout), and reboots into it.
package upgradestick

import (
	"context"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
)

// Installer installs upgrades (firstboot's upgrade path).
type Installer interface {
	// FromMedium installs the one upgrade file at the root of m under
	// the running config, saying on the console what became of it, and
	// says whether it was written into the other slot.
	FromMedium(ctx context.Context, cfg *machineconfig.Config, m media.Medium) (installed bool)
	// Reboot reboots into the slot an upgrade was just written into.
	Reboot(ctx context.Context)
}

// Holder is the node's change lock (controller.ChangeLock).
type Holder interface {
	Hold(what string)
	Unlock()
}

// Controller serves TERRA-UPGRADE sticks.
type Controller struct {
	Media media.Media
	// Config is the config the node runs now.
	Config  func() *machineconfig.Config
	Changes Holder
	Install Installer

	sticks media.Insertions
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "upgrade-stick" }

// Reconcile installs from a stick inserted since the last look, holding
// the change lock (no config change or rollout turn beside it), and
// reboots when the upgrade was written. What refuses an upgrade is the
// installer's to say; it is not an error of the controller.
func (c *Controller) Reconcile(ctx context.Context) error {
	m, ok := c.sticks.Next(c.Media, layout.LabelUpgrade, layout.LabelUpgradeFAT)
	if !ok {
		return nil
	}
	c.Changes.Hold("the upgrade stick")
	defer c.Changes.Unlock()
	if c.Install.FromMedium(ctx, c.Config(), m) {
		c.Install.Reboot(ctx)
	}
	return nil
}
