package firstboot

import (
	"context"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// newRollouts makes the node's rollout controller, once a boot: the
// watch runs it, and the upgrade path hands an upgrade to the cluster
// through it.
func (r *runner) newRollouts() *rollouts.Controller {
	return &rollouts.Controller{Options: r.o.Rollout, Node: rolloutSide{r}, Host: r.o.Host, Log: r.o.Log, Space: r.o.Space,
		Journal: r.state, Status: r.pub, Changes: &r.changing, Config: r.cfg.get, Version: r.rel.Version, Slot: r.slot}
}

// rolloutSide is the node's side of the rollout controller
// (rollouts.Node).
type rolloutSide struct{ r *runner }

var _ rollouts.Node = rolloutSide{}

func (n rolloutSide) Say(format string, args ...any) { n.r.say(format, args...) }

func (n rolloutSide) Note(name string, result step.Result, detail string) {
	n.r.note(name, result, detail)
}

func (n rolloutSide) UpgradeKeys(cfg *machineconfig.Config) []signature.PublicKey {
	return n.r.upgradeKeys(cfg)
}

// Stage writes the rollout's upgrade into the other slot, staged; the
// controller arms it once the node is drained, and reboots into it.
func (n rolloutSide) Stage(ctx context.Context, cfg *machineconfig.Config, file rollouts.File, digest, record string, policy upgrade.Policy, beforeTurn bool) (func(context.Context) nodestate.UpgradeResult, nodestate.UpgradeResult) {
	return n.r.stageUpgrade(ctx, cfg, upgradeSource{
		what: "the cluster's rollout", record: record,
		file:    file,
		rollout: true, digest: digest, beforeTurn: beforeTurn,
	}, policy)
}

func (n rolloutSide) Reboot(ctx context.Context) { n.r.rebootIntoUpgrade(ctx) }

func (n rolloutSide) RebootAsked() time.Time { return n.r.reboot.last() }
