// Package configchange is the controller that takes the signed config
// changes a person brings while the node runs. At each look it asks the
// change sources (a TERRA-CONFIG stick, say) what they offer; an offer is
// judged once, not at every look, against the config the node runs and
// under the node's change lock. A change taken is applied, becomes the
// running config, and the health check follows.
package configchange

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
)

// Offer is what the change sources held at one look: a config found,
// nothing (nil, nil), or a medium that could not be read.
type Offer struct {
	Found *configsource.Found
	Err   error
}

// Fingerprint identifies an offer, so that the same medium is judged
// once: the boot that judged one hands its fingerprint to the controller
// (Controller.Seen).
func (o Offer) Fingerprint() string {
	h := sha256.New()
	switch {
	case o.Err != nil:
		_, _ = fmt.Fprintf(h, "error\x00%s", o.Err) // a hash never fails a write
	case o.Found != nil:
		_, _ = fmt.Fprintf(h, "found\x00%s\x00%d\x00", o.Found.Source, len(o.Found.Config))
		h.Write(o.Found.Config)
		h.Write([]byte{0})
		h.Write(o.Found.Signature)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// empty: the sources hold nothing (a stick was pulled).
func (o Offer) empty() bool { return o.Found == nil && o.Err == nil }

// Node is what the controller asks of the node (firstboot).
type Node interface {
	// Look asks the change sources what they offer now.
	Look(ctx context.Context) Offer
	// Take judges an offer against the running config, saying on the
	// console and in the journal why one is refused, and applies one
	// that is taken. It returns the config the node runs after and
	// whether a change was taken.
	Take(ctx context.Context, running *machineconfig.Config, o Offer) (*machineconfig.Config, bool)
	// Check runs the health check after a change and reports it.
	Check(ctx context.Context, cfg *machineconfig.Config)
	// Publish writes the node's status (a refusal, a change).
	Publish()
}

// Holder is the node's change lock (controller.ChangeLock).
type Holder interface {
	Hold(what string)
	Unlock()
}

// Controller takes the changes.
type Controller struct {
	Node    Node
	Changes Holder
	// Config is the config the node runs; SetConfig replaces it once a
	// change is taken.
	Config    func() *machineconfig.Config
	SetConfig func(*machineconfig.Config)
	Log       *slog.Logger
	// Seen is the fingerprint of the offer last judged: at start, the
	// one the boot judged.
	Seen string
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "config-change" }

// Reconcile looks at the change sources and judges a new offer.
func (c *Controller) Reconcile(ctx context.Context) error {
	o := c.Node.Look(ctx)
	fp := o.Fingerprint()
	if fp == c.Seen {
		return nil
	}
	c.Seen = fp
	if o.empty() {
		c.Log.Info("the config medium was removed")
		return nil
	}
	// Judged and applied against the config the node runs, with no
	// upgrade or rollout turn under way.
	c.Changes.Hold("the config change")
	defer c.Changes.Unlock()
	cfg, taken := c.Node.Take(ctx, c.Config(), o)
	if taken {
		c.SetConfig(cfg)
		c.Node.Check(ctx, cfg)
	}
	c.Node.Publish()
	return nil
}
