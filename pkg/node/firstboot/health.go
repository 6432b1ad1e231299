package firstboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/ops/timesync"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// errUnhealthy marks a failed health check.
var errUnhealthy = errors.New("health check failed")

// health checks that the node is what the config says and its state is
// writable. A release carrying the "health" fault (a deliberately broken
// test build) always fails.
func (r *runner) health(ctx context.Context, cfg *machineconfig.Config) error {
	if r.rel.HasFault("health") {
		return fmt.Errorf("%w: this build carries the injected fault \"health\"", errUnhealthy)
	}
	for _, p := range r.phases(cfg) {
		err := p.Verify(ctx, cfg)
		if err != nil && p.Waits {
			if ranOut := r.ranOut[p.Name]; ranOut != nil {
				// Its wait ran out in this apply: looked at once, not
				// waited for twice, and failed with what the wait
				// said (where to look).
				err = ranOut
			} else {
				// A phase that waits gets its wait: a kubelet the
				// upgrade phase restarted is Ready again a little
				// later.
				r.say("health: %s: not yet (%v); waiting", p.Name, err)
				if err = p.Apply(ctx, cfg); err == nil {
					err = p.Verify(ctx, cfg)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", errUnhealthy, p.Name, err)
		}
	}
	if err := nodestate.On(r.o.Host).ProbeWritable([]byte(r.bootID)); err != nil {
		return fmt.Errorf("%w: TERRA-STATE is not writable: %w", errUnhealthy, err)
	}
	return nil
}

// checkHealth runs the health check and reports it: the status, the
// journal and, when it fails, the console.
func (r *runner) checkHealth(ctx context.Context, cfg *machineconfig.Config) error {
	err := r.health(ctx, cfg)
	r.set(func(s *status.Status) { s.SetHealthy(err == nil) })
	if err != nil {
		r.note("health", step.Failed, err.Error())
		r.set(func(s *status.Status) { s.Message = err.Error() })
		r.say("%v", err)
		return err
	}
	r.note("health", step.Passed, "")
	return nil
}

func (r *runner) healthAndBless(ctx context.Context, cfg *machineconfig.Config) error {
	if err := r.checkHealth(ctx, cfg); err != nil {
		r.set(func(s *status.Status) { s.Blessed = "not blessed" })
		return r.notBlessed(ctx, err)
	}
	r.set(func(s *status.Status) { s.Time = r.timeSource(ctx, cfg) })
	// Healthy: every image the node runs is unpacked; made durable before
	// the window closes.
	if closed, err := unpackwindow.Close(r.o.Host); err != nil {
		r.note("images durable", step.Failed, err.Error())
		r.set(func(s *status.Status) { s.Message = err.Error() })
		r.publish()
		return err
	} else if closed {
		r.note("images durable", step.Synced, "")
	}
	res, err := r.o.BootLoader.Bless(ctx, r.slot)
	if err != nil {
		r.note("bless", step.Failed, err.Error())
		r.set(func(s *status.Status) { s.Blessed = "bless failed: " + err.Error() })
		r.publish()
		return fmt.Errorf("bless slot %s: %w", r.slot, err)
	}
	r.set(func(s *status.Status) { s.Blessed = string(res) })
	r.note("bless", step.Result(res), "")
	// No longer a trial: the registry lets go of the slot it fell back to,
	// which the next upgrade may write.
	if err := os.Remove(r.o.Host.Path(layout.RunTrialBoot)); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.say("blessed, but %s stays: %v", layout.RunTrialBoot, err)
	}
	r.commitUpgrade()
	r.publish()
	return nil
}

// notBlessed ends a boot that failed (err): a slot on trial reboots after
// TrialRebootDelay, so that the boot loader counts the failed try and,
// once the tries are spent, falls back to the other slot; a blessed slot
// stays up for repair (rebooting would only loop) and err is returned.
func (r *runner) notBlessed(ctx context.Context, err error) error {
	trial, terr := r.o.BootLoader.OnTrial(ctx, r.slot)
	if terr != nil || !trial {
		r.say("this boot is NOT blessed; the slot is not on trial, so it stays up for repair")
		r.publish()
		return err
	}
	r.say("this boot is NOT blessed; rebooting in %s so the boot loader counts the failed try", r.o.TrialRebootDelay)
	r.publish()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.o.TrialRebootDelay):
	}
	return r.o.Reboot(ctx)
}

// timeSource says where the node's time comes from, for the status.
func (r *runner) timeSource(ctx context.Context, cfg *machineconfig.Config) string {
	tr, err := timesync.Track(ctx, r.o.Host)
	switch {
	case errors.Is(err, timesync.ErrNoChrony):
		return "local clock (" + err.Error() + ")"
	case err != nil:
		return "unknown: " + err.Error()
	case cfg.Cluster == nil && !tr.Synced():
		return "local clock (a standalone node has no time source)"
	}
	return tr.String()
}
