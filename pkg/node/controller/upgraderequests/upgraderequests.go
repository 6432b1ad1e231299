// Package upgraderequests is the controller that takes the requests of
// `firstboot upgrade FILE|DEVICE` (nodestate's upgrade-request.json): each
// is removed before anything else, so that a node that dies on it does not
// take it again, and answered (upgrade-result.json) whatever becomes of it.
package upgraderequests

import (
	"context"
	"errors"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
)

// Installer installs upgrades (firstboot's upgrade path).
type Installer interface {
	// FromRequest installs the upgrade file at path, or the one on the
	// block device path, under the running config (forced: an upgrade
	// rolled back before is installed again too), saying on the console
	// what became of it; reboot says whether a reboot into it follows.
	FromRequest(ctx context.Context, cfg *machineconfig.Config, path string, force, reboot bool) nodestate.UpgradeResult
	// Reboot reboots into the slot an upgrade was just written into.
	Reboot(ctx context.Context)
}

// Holder is the node's change lock (controller.ChangeLock).
type Holder interface {
	Hold(what string)
	Unlock()
}

// Requests are where the requests wait and their answers go: the node
// state's files (nodestate.Files).
type Requests interface {
	TakeUpgradeRequest() (nodestate.UpgradeRequest, error)
	AnswerUpgradeRequest(nodestate.UpgradeResult) error
}

var _ Requests = nodestate.Files{}

// Controller takes the requests.
type Controller struct {
	Requests Requests
	// Config is the config the node runs now.
	Config  func() *machineconfig.Config
	Changes Holder
	Install Installer
	Report  controller.Reporter
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "upgrade-requests" }

// Reconcile takes a waiting request, if there is one, answers it, and
// reboots into what it installed unless the request said not to. The
// answer is written before the reboot cuts the asker off.
func (c *Controller) Reconcile(ctx context.Context) error {
	req, err := c.Requests.TakeUpgradeRequest()
	switch {
	case errors.Is(err, nodestate.ErrNoUpgradeRequest):
		return nil
	case err != nil && !errors.Is(err, nodestate.ErrBadUpgradeRequest):
		c.Report.Say("upgrade request %s: %v", nodestate.UpgradeRequestFile, err)
		return nil
	}
	answer := func(res nodestate.UpgradeResult) {
		res.ID = req.ID
		if err := c.Requests.AnswerUpgradeRequest(res); err != nil {
			c.Report.Say("answering the upgrade request: %v", err)
		}
	}
	if err != nil {
		c.Report.Say("%v (%s): nothing was written", err, nodestate.UpgradeRequestFile)
		answer(nodestate.UpgradeResult{Outcome: nodestate.OutcomeRefused, Detail: err.Error()})
		return nil
	}
	c.Changes.Hold("the upgrade request")
	defer c.Changes.Unlock()
	res := c.Install.FromRequest(ctx, c.Config(), req.Path, req.Force, !req.NoReboot)
	answer(res)
	if res.Outcome == nodestate.OutcomeInstalled && !req.NoReboot {
		c.Install.Reboot(ctx)
	}
	return nil
}
