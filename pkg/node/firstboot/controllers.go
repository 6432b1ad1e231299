package firstboot

import (
	"context"
	"sync"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/controller/admission"
	"github.com/terrarium-os/terrarium/pkg/node/controller/backupstick"
	"github.com/terrarium-os/terrarium/pkg/node/controller/configchange"
	"github.com/terrarium-os/terrarium/pkg/node/controller/keyrotation"
	"github.com/terrarium-os/terrarium/pkg/node/controller/snapshots"
	"github.com/terrarium-os/terrarium/pkg/node/controller/supportstick"
	"github.com/terrarium-os/terrarium/pkg/node/controller/upgraderequests"
	"github.com/terrarium-os/terrarium/pkg/node/controller/upgradestick"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// watch runs, once the boot is done, what a running node watches: each a
// controller in its own loop (pkg/node/controller), until ctx ends.
func (r *runner) watch(ctx context.Context, cfg *machineconfig.Config) error {
	r.say("watching for signed config changes: insert a %s stick holding machine.yaml and machine.yaml.sig; a %s stick receives a support bundle, a %s stick the node's backups (a control plane's etcd, and its volumes where the config opts in)", layout.LabelConfig, layout.LabelSupport, layout.LabelBackup)
	r.cfg.set(cfg)
	controller.Run(ctx, r.o.Log, r.controllers()...)
	return nil
}

// controllers are the node's controllers, each looking every
// WatchInterval; the rollout paces its looks at the API itself
// (Rollout.Poll).
func (r *runner) controllers() []controller.Scheduled {
	cs := []controller.Controller{
		&supportstick.Controller{Host: r.o.Host, Media: r.o.Media, Report: r},
		&backupstick.Controller{Media: r.o.Media, Backup: r.backups(), Config: r.cfg.get, Report: r},
		&snapshots.Controller{Host: r.o.Host, Space: r.o.Space, Config: r.cfg.get, Status: r.pub, Report: r},
		&upgradestick.Controller{Media: r.o.Media, Config: r.cfg.get, Changes: &r.changing, Install: upgrades{r}},
		&upgraderequests.Controller{Requests: nodestate.On(r.o.Host), Config: r.cfg.get, Changes: &r.changing, Install: upgrades{r}, Report: r},
		r.rollouts,
		&configchange.Controller{Node: changes{r}, Changes: &r.changing, Config: r.cfg.get, SetConfig: r.cfg.set, Log: r.o.Log, Seen: r.changeSeen},
		&admission.Controller{Config: r.cfg.get, Admit: r.flow.AdmitNodes},
		&keyrotation.Controller{Host: r.o.Host, Config: r.cfg.get, Changes: &r.changing,
			AdminKubeconfig: kubeadmflow.AdminKubeconfig, NewRotator: r.newRotator},
	}
	out := make([]controller.Scheduled, len(cs))
	for i, c := range cs {
		out[i] = controller.Scheduled{Controller: c, Every: r.o.WatchInterval}
	}
	return out
}

// changes is the node's side of the config change controller
// (configchange.Node).
type changes struct{ r *runner }

var _ configchange.Node = changes{}

func (c changes) Look(ctx context.Context) configchange.Offer {
	found, err := c.r.probe(ctx, c.r.o.ChangeSources)
	return configchange.Offer{Found: found, Err: err}
}

func (c changes) Take(ctx context.Context, running *machineconfig.Config, o configchange.Offer) (*machineconfig.Config, bool) {
	ch := c.r.decide(running, o.Found, o.Err)
	if ch == nil {
		return running, false
	}
	return c.r.applyChange(ctx, running, ch), true
}

func (c changes) Check(ctx context.Context, cfg *machineconfig.Config) {
	_ = c.r.checkHealth(ctx, cfg) // reported; the node keeps watching for a change that repairs it
}

func (c changes) Publish() { c.r.publish() }

// Say implements controller.Reporter: the console and the log.
func (r *runner) Say(format string, args ...any) { r.say(format, args...) }

// Note implements controller.Reporter: this boot's journal record, a
// failed write logged.
func (r *runner) Note(name string, result step.Result, detail string) { r.note(name, result, detail) }

var _ controller.Reporter = (*runner)(nil)

// configHolder is the config the node runs: the boot's, then each
// applied change's.
type configHolder struct {
	mu  sync.Mutex
	cfg *machineconfig.Config
}

func (h *configHolder) get() *machineconfig.Config {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfg
}

func (h *configHolder) set(cfg *machineconfig.Config) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cfg = cfg
}

// rebootClock is when this boot last asked for a reboot into an upgrade
// (zero: never).
type rebootClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *rebootClock) asked(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = at
}

func (c *rebootClock) last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}
