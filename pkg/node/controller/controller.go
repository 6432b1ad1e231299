// Package controller runs what a node watches once it has booted: each
// controller in its own goroutine with its own loop, so that one that is
// slow (a rollout waiting on the API, a backup writing a stick) never
// holds up another — in the manner of gardener-node-agent's reconcilers
// and Talos's controllers.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Controller looks at one thing the node watches and acts on it.
type Controller interface {
	// Name names the controller in the log.
	Name() string
	// Reconcile looks once and acts on what it finds, and returns when
	// that is done. An error is logged; the controller looks again at
	// its next turn.
	Reconcile(ctx context.Context) error
}

// Scheduled is a controller and the time between the end of one of its
// looks and the start of the next.
type Scheduled struct {
	Controller
	Every time.Duration
}

// Run runs each controller in its own goroutine, a first look one Every
// after the start, until ctx ends, and returns when every one has
// stopped. A look that panics is logged with its stack and the
// controller goes on at its next turn: one controller's bug does not stop
// the others.
func Run(ctx context.Context, log *slog.Logger, controllers ...Scheduled) {
	var wg sync.WaitGroup
	for _, c := range controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx, log.With("controller", c.Name()), c)
		}()
	}
	wg.Wait()
}

// loop runs c until ctx ends.
func loop(ctx context.Context, log *slog.Logger, c Scheduled) {
	every := c.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTimer(every)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := reconcile(ctx, c)
		switch {
		case err == nil:
			if lastErr != "" {
				log.Info("reconciled again")
			}
			lastErr = ""
		case ctx.Err() != nil:
			return
		case err.Error() != lastErr:
			// Said once while it fails the same way, not at every look.
			log.Warn("reconcile failed", "err", err)
			lastErr = err.Error()
		}
		t.Reset(every)
	}
}

// reconcile runs one look, turning a panic into an error.
func reconcile(ctx context.Context, c Controller) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return c.Reconcile(ctx)
}
