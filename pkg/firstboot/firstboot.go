// Package firstboot is the appliance's orchestrator, run by systemd at every
// boot: it acquires the machine config from a config disk, applies it on
// the first boot (verifies and heals on later boots), records each step in a
// journal on TERRA-STATE, reports status on the console and in
// /run/terrarium/status.json, and blesses the boot only when its health
// check passes.
package firstboot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/terrarium-os/terrarium/pkg/layout"
	"github.com/terrarium-os/terrarium/pkg/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/release"
)

// Options wires firstboot to its machine. Every field has a production
// value from Defaults; tests replace them.
type Options struct {
	Host    *Host
	Console io.Writer // what a person at the machine reads
	Log     *slog.Logger
	// ConfigSource returns the machine config's bytes and where they came
	// from, or ok=false when no config disk is present.
	ConfigSource func(ctx context.Context) (data []byte, from string, ok bool, err error)
	// BootLoader blesses the boot.
	BootLoader BootLoader
	// Reboot restarts the machine (after a failed trial boot).
	Reboot       func(ctx context.Context) error
	PollInterval time.Duration
	// AddressWait bounds the wait for configured interfaces' addresses.
	AddressWait time.Duration
	// TrialRebootDelay is how long a failed trial boot stays up (for a
	// person to read the console) before it reboots into the fallback.
	TrialRebootDelay time.Duration
	Now              func() time.Time
}

// Run provisions or verifies the machine, then blesses the boot if healthy.
func Run(ctx context.Context, o Options) error {
	r, err := newRunner(o)
	if err != nil {
		return err
	}
	return r.run(ctx)
}

type runner struct {
	o Options
	// mu guards the journal, this boot's record and the status: long
	// phases report progress from several goroutines (the image pulls),
	// and the journal has one writer at a time.
	mu      sync.Mutex
	rel     *release.Release
	slot    layout.Slot
	bootID  string
	journal *Journal
	rec     *BootRecord
	status  Status
}

func newRunner(o Options) (*runner, error) {
	h := o.Host
	rel, err := release.Load(h.Path(layout.ReleaseFile))
	if err != nil {
		return nil, err
	}
	cmdline, _ := os.ReadFile(h.Path("/proc/cmdline"))
	slot := layout.SlotA
	for _, f := range strings.Fields(string(cmdline)) {
		if v, ok := strings.CutPrefix(f, layout.CmdlineSlot+"="); ok && layout.Slot(v).Valid() {
			slot = layout.Slot(v)
		}
	}
	bootID, _ := os.ReadFile(h.Path("/proc/sys/kernel/random/boot_id"))
	j, err := LoadJournal(h.Path(journalPath()))
	if err != nil {
		return nil, err
	}
	// One line at a time on the console, whichever goroutine reports.
	o.Console = &lockedWriter{w: o.Console}
	r := &runner{o: o, rel: rel, slot: slot, bootID: strings.TrimSpace(string(bootID)), journal: j}
	r.rec = j.Current(r.bootID, string(slot))
	r.status = Status{Name: rel.Name, Version: rel.Version, Slot: string(slot), Boot: r.rec.Boot}
	created, _ := os.ReadFile(h.Path(layout.StateMount + "/" + layout.StateMarkerFile))
	r.status.StateCreated = strings.TrimSpace(string(created))
	return r, nil
}

func journalPath() string { return layout.StateMount + "/" + layout.StateJournal }

func (r *runner) say(format string, args ...any) {
	fmt.Fprintf(r.o.Console, "terrarium: "+format+"\n", args...)
	r.o.Log.Info(fmt.Sprintf(format, args...))
}

func (r *runner) saveJournal() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.journal.Save(r.o.Host.Path(journalPath()))
}

func (r *runner) step(name, result, detail string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Steps = append(r.rec.Steps, StepRecord{Name: name, Result: result, Detail: detail, At: r.o.Now().UTC()})
	return r.journal.Save(r.o.Host.Path(journalPath()))
}

func (r *runner) run(ctx context.Context) error {
	if err := r.saveJournal(); err != nil {
		return fmt.Errorf("journal on TERRA-STATE: %w", err)
	}
	r.say("Terrarium %s, slot %s, boot %d", r.rel.Version, r.slot, r.rec.Boot)
	cfg, digest, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	mode := "provision"
	if p := r.journal.Provisioned; p != nil && p.ConfigDigest == digest {
		mode = "verify"
	}
	r.rec.Mode = mode
	if err := r.apply(ctx, cfg, mode); err != nil {
		r.rec.Result = "failed"
		r.status.State, r.status.Message = StateFailed, err.Error()
		r.saveJournal()
		r.publish()
		return err
	}
	if mode == "provision" {
		r.journal.Provisioned = &Provisioned{ConfigDigest: digest, At: r.o.Now().UTC(), Boot: r.rec.Boot}
		r.status.State = StateProvisioned
	} else {
		r.status.State = StateVerified
	}
	r.rec.Result = r.status.State
	r.status.Hostname, r.status.Mode, r.status.ConfigDigest = cfg.Hostname, mode, digest
	if err := r.saveJournal(); err != nil {
		return err
	}
	r.waitForAddresses(ctx, cfg)
	return r.healthAndBless(ctx, cfg)
}

// acquire waits for a valid machine config. Nothing is applied while the
// config is missing or invalid; the console says what to do.
func (r *runner) acquire(ctx context.Context) (*machineconfig.Config, string, error) {
	var lastProblem string
	for {
		data, from, ok, err := r.o.ConfigSource(ctx)
		problem := ""
		switch {
		case err != nil:
			problem = err.Error()
		case !ok:
			problem = "waiting"
		default:
			cfg, perr := machineconfig.Parse(from+":"+"machine.yaml", data)
			if perr == nil {
				perr = r.admissible(cfg)
			}
			if perr == nil {
				r.say("config from %s is valid (%s)", from, cfg.Digest())
				// The note about a missing or invalid config is settled.
				r.status.Message = ""
				return cfg, cfg.Digest(), nil
			}
			problem = perr.Error()
		}
		if problem != lastProblem {
			r.reportConfigProblem(problem)
			lastProblem = problem
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(r.o.PollInterval):
		}
	}
}

// admissible reports what makes a valid config unusable on this machine
// now, before anything is applied: a bootstrap token that expired before
// it was used (the init node creates it in the cluster, the others join
// with it; afterwards its expiry no longer matters).
func (r *runner) admissible(cfg *machineconfig.Config) error {
	cl := cfg.Cluster
	if cl == nil || tokenUsed(r.o.Host, cl.Role) {
		return nil
	}
	return cl.CheckToken(r.o.Now())
}

func (r *runner) reportConfigProblem(problem string) {
	if problem == "waiting" {
		r.status.State = StateWaiting
		r.status.Message = "insert a config disk labelled TERRA-CONFIG holding machine.yaml"
		r.say("no config disk found: insert a disk or USB stick labelled %s holding %s (make one with 'imagebuild config disk'); waiting", layout.LabelConfig, "machine.yaml")
	} else {
		r.status.State = StateConfigInvalid
		r.status.Message = problem
		r.say("the config is invalid; nothing was applied. Fix these and re-insert the disk:")
		for _, line := range strings.Split(problem, "\n") {
			r.say("  %s", line)
		}
	}
	r.step("config", "waiting", r.status.Message)
	r.publish()
}

// apply runs each phase: provision applies; verify checks and heals what
// drifted.
func (r *runner) apply(ctx context.Context, cfg *machineconfig.Config, mode string) error {
	r.watchHost(cfg)
	for _, p := range phasesFor(cfg) {
		if mode == "verify" {
			if err := p.Verify(ctx, r.o.Host, cfg); err == nil {
				if err := r.step(p.Name, "verified", ""); err != nil {
					return err
				}
				continue
			} else {
				r.say("%s drifted (%v); healing", p.Name, err)
			}
		}
		if err := p.Apply(ctx, r.o.Host, cfg); err != nil {
			r.step(p.Name, "failed", err.Error())
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		result := "applied"
		if mode == "verify" {
			result = "healed"
		}
		if err := r.step(p.Name, result, ""); err != nil {
			return err
		}
		r.say("%s: %s", p.Name, result)
	}
	return nil
}

// waitForAddresses gives configured interfaces a moment (DHCP) to get
// their addresses, so the banner shows them. It never fails the boot: a
// DHCP server that is down must not roll the node back.
func (r *runner) waitForAddresses(ctx context.Context, cfg *machineconfig.Config) {
	if len(cfg.Network.Interfaces) == 0 {
		return
	}
	deadline := r.o.Now().Add(r.o.AddressWait)
	for len(addresses()) == 0 && r.o.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// watchHost lets long phases report their steps: each goes to the
// journal, the console and the published status.
func (r *runner) watchHost(cfg *machineconfig.Config) {
	h := r.o.Host
	if cfg.Cluster != nil && r.status.Cluster == nil {
		r.status.Cluster = &ClusterStatus{Role: cfg.Cluster.Role}
	}
	h.Progress = func(step, result, detail string) {
		r.step(step, result, detail)
		if detail != "" {
			r.say("%s: %s: %s", step, result, detail)
		} else {
			r.say("%s: %s", step, result)
		}
		// What a node waits for, and the end of a wait (a join lock
		// taken), show in the status as they happen.
		if result == "started" || result == "waiting" || result == "lock" {
			r.publish()
		}
	}
	h.Cluster = func(update func(*ClusterStatus)) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.status.Cluster == nil {
			r.status.Cluster = &ClusterStatus{}
		}
		update(r.status.Cluster)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
