// Package leaselock is a mutual-exclusion lock across the nodes of a
// cluster, held in a Kubernetes Lease.
//
// firstboot takes it around a control plane's etcd join: kubeadm adds one
// etcd member at a time (etcd refuses a second learner, and two voters
// added before either starts cost the cluster its quorum), but control
// planes booted together reach that step together.
//
// The lock is a Lease object written with optimistic concurrency: a node
// takes a free Lease (no holder) by updating it at the version it read,
// and of two nodes that try at once the API accepts one update and
// answers the other with a conflict. The holder renews the Lease while it
// works and clears the holder when done. A holder that dies (a power cut)
// stops renewing: the others take the Lease once they have seen it
// unchanged for its duration, measured on their own clocks, since the
// nodes of an air-gapped site have no common time source. A node that
// finds the Lease held under its own name (it restarted while holding it)
// takes it back at once.
package leaselock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// Store reads and writes Leases (pkg/node/kube/kubeclient.Client).
type Store interface {
	Lease(ctx context.Context, namespace, name string) (kubeclient.Lease, error)
	CreateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error)
	UpdateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error)
}

// Lock is one named lock, taken under one identity.
type Lock struct {
	store                     Store
	namespace, name, identity string
	o                         options
}

type options struct {
	duration time.Duration
	poll     time.Duration
	now      func() time.Time
	report   func(event, detail string)
	// keepAfterFailure: a failed fn leaves the lock held.
	keepAfterFailure bool
}

// Option changes a Lock's defaults.
type Option func(*options) error

// WithDuration sets how long a Lease may go unrenewed before others take
// it (default 3 minutes); the holder renews it three times as often.
func WithDuration(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second {
			return fmt.Errorf("lease duration %s: must be at least a second", d)
		}
		o.duration = d
		return nil
	}
}

// WithPoll sets how often a waiting node reads the Lease (default 5 s).
func WithPoll(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("poll interval %s: must be positive", d)
		}
		o.poll = d
		return nil
	}
}

// WithClock sets the clock (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(o *options) error { o.now = now; return nil }
}

// WithReport hears what the lock does: "waiting" (detail: the holder),
// "unreachable" (detail: why the Lease could not be read or written),
// "acquired", "renew failed", "lost" (detail: the new holder), "released",
// "release failed", "kept" (detail: fn's error; see KeepAfterFailure).
func WithReport(report func(event, detail string)) Option {
	return func(o *options) error { o.report = report; return nil }
}

// KeepAfterFailure leaves the lock held, unrenewed, when fn fails, instead
// of releasing it: for work that a failure may leave half done and that
// only its holder should resume (an etcd member added but not yet
// promoted). The holder takes it back at once when it retries; the others
// take it only once it has gone unrenewed for the Lease's duration.
func KeepAfterFailure() Option {
	return func(o *options) error { o.keepAfterFailure = true; return nil }
}

// New is a lock named namespace/name, taken as identity.
func New(store Store, namespace, name, identity string, opts ...Option) (*Lock, error) {
	if identity == "" {
		return nil, errors.New("lease lock: an identity is required")
	}
	o := options{duration: 3 * time.Minute, poll: 5 * time.Second, now: time.Now, report: func(string, string) {}}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("lease lock %s/%s: %w", namespace, name, err)
		}
	}
	return &Lock{store: store, namespace: namespace, name: name, identity: identity, o: o}, nil
}

// Do runs fn while holding the lock: it waits for the lock, renews it in
// the background while fn runs, and releases it after (unless fn failed
// and the lock was made with KeepAfterFailure). fn's context ends
// with ctx. Do returns fn's error, or the error that kept it from taking
// the lock (ctx's, when ctx ended first).
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	held, err := l.acquire(ctx)
	if err != nil {
		return err
	}
	l.o.report("acquired", l.identity)
	renewCtx, stopRenew := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	current := &heldLease{lease: held}
	go func() {
		defer wg.Done()
		l.renew(renewCtx, current)
	}()
	fnErr := fn(ctx)
	stopRenew()
	wg.Wait()
	if fnErr != nil && l.o.keepAfterFailure {
		l.o.report("kept", fnErr.Error())
		return fnErr
	}
	// Released even when ctx ended.
	if err := l.releaseRetrying(context.WithoutCancel(ctx), current.get()); err != nil {
		l.o.report("release failed", err.Error())
	} else {
		l.o.report("released", "")
	}
	return fnErr
}

// releaseRetrying releases the lock, retrying every poll interval while the
// API fails (a loaded API server times requests out), until the Lease would
// have expired on its own: a release that waits out a bad spell saves the
// next node the rest of the Lease's duration.
func (l *Lock) releaseRetrying(ctx context.Context, held kubeclient.Lease) error {
	expires := held.RenewTime.Add(l.o.duration)
	for {
		tryCtx, cancel := context.WithTimeout(ctx, kubeclient.Timeout)
		err := l.release(tryCtx, held)
		cancel()
		if err == nil {
			return nil
		}
		if !l.o.now().Add(l.o.poll).Before(expires) {
			return fmt.Errorf("%w (no more retries: the lease expires on its own at %s)", err, expires.Format(time.RFC3339))
		}
		l.o.report("release failed", err.Error()+" (retrying)")
		select {
		case <-ctx.Done():
			return fmt.Errorf("release lock %s/%s: %w", l.namespace, l.name, ctx.Err())
		case <-time.After(l.o.poll):
		}
	}
}

// heldLease is the last version of the Lease the holder wrote.
type heldLease struct {
	mu    sync.Mutex
	lease kubeclient.Lease
}

func (h *heldLease) get() kubeclient.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

func (h *heldLease) set(l kubeclient.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease = l
}

// acquire waits until this identity holds the Lease.
func (l *Lock) acquire(ctx context.Context) (kubeclient.Lease, error) {
	var seen observation
	reported := ""
	for {
		got, holder, err := l.try(ctx, &seen)
		if err == nil && holder == l.identity {
			return got, nil
		}
		if ctx.Err() != nil {
			return kubeclient.Lease{}, fmt.Errorf("wait for lock %s/%s: %w", l.namespace, l.name, ctx.Err())
		}
		// Told once per holder, and once per spell of API errors (their
		// texts vary from poll to poll), not at every poll.
		switch {
		case err != nil && reported != "unreachable":
			l.o.report("unreachable", err.Error())
			reported = "unreachable"
		case err == nil && holder != "" && reported != holder:
			l.o.report("waiting", holder)
			reported = holder
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.o.poll):
		}
	}
}

// observation is when a waiter first saw the Lease at its current version,
// on the waiter's own clock.
type observation struct {
	version string
	at      time.Time
}

// try makes one attempt: it reads the Lease and takes it if it is free,
// its own, or expired. It returns the holder it left the Lease with (this
// identity when it took it; "" after a lost race), or what kept it from
// trying (the API did not answer, say).
func (l *Lock) try(ctx context.Context, seen *observation) (kubeclient.Lease, string, error) {
	now := l.o.now()
	cur, err := l.store.Lease(ctx, l.namespace, l.name)
	if errors.Is(err, kubeclient.ErrNotFound) {
		created, err := l.store.CreateLease(ctx, kubeclient.Lease{Namespace: l.namespace, Name: l.name,
			Holder: l.identity, DurationSeconds: l.seconds(), AcquireTime: now, RenewTime: now})
		return took(created, err)
	}
	if err != nil {
		return kubeclient.Lease{}, "", err
	}
	if cur.ResourceVersion != seen.version {
		*seen = observation{version: cur.ResourceVersion, at: now}
	}
	dur := time.Duration(cur.DurationSeconds) * time.Second
	if dur <= 0 {
		dur = l.o.duration
	}
	expired := now.Sub(seen.at) >= dur
	if cur.Holder != "" && cur.Holder != l.identity && !expired {
		return kubeclient.Lease{}, cur.Holder, nil
	}
	next := cur
	if cur.Holder != l.identity {
		next.Transitions++
		next.AcquireTime = now
	}
	next.Holder, next.DurationSeconds, next.RenewTime = l.identity, l.seconds(), now
	return took(l.store.UpdateLease(ctx, next))
}

// took is the outcome of a create or update that tried to take the Lease.
func took(l kubeclient.Lease, err error) (kubeclient.Lease, string, error) {
	switch {
	case errors.Is(err, kubeclient.ErrConflict):
		return kubeclient.Lease{}, "", nil // another node was faster
	case err != nil:
		return kubeclient.Lease{}, "", err
	}
	return l, l.Holder, nil
}

func (l *Lock) seconds() int { return int(l.o.duration / time.Second) }

// renew writes the Lease every third of its duration until ctx ends. A
// failed write is retried every poll interval, not a third of the duration
// later: two failures in a row on a loaded API server would otherwise
// leave the Lease unrenewed for its whole duration.
func (l *Lock) renew(ctx context.Context, h *heldLease) {
	every, retry := l.o.duration/3, min(l.o.poll, l.o.duration/3)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := h.get()
		next.RenewTime = l.o.now()
		updated, err := l.store.UpdateLease(ctx, next)
		if err == nil {
			h.set(updated)
			t.Reset(every)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		t.Reset(retry)
		if errors.Is(err, kubeclient.ErrConflict) {
			// Someone wrote it: another node that judged this one dead.
			if cur, gerr := l.store.Lease(ctx, l.namespace, l.name); gerr == nil {
				if cur.Holder == l.identity {
					h.set(cur)
					continue
				}
				l.o.report("lost", cur.Holder)
			}
		}
		l.o.report("renew failed", err.Error())
	}
}

// release clears the holder, if this identity still holds the Lease.
func (l *Lock) release(ctx context.Context, held kubeclient.Lease) error {
	next := held
	next.Holder = ""
	_, err := l.store.UpdateLease(ctx, next)
	if errors.Is(err, kubeclient.ErrConflict) {
		cur, gerr := l.store.Lease(ctx, l.namespace, l.name)
		if gerr != nil {
			return fmt.Errorf("release lock %s/%s: %w", l.namespace, l.name, gerr)
		}
		if cur.Holder != l.identity {
			return nil // taken over meanwhile: nothing to release
		}
		next = cur
		next.Holder = ""
		_, err = l.store.UpdateLease(ctx, next)
	}
	if err != nil {
		return fmt.Errorf("release lock %s/%s: %w", l.namespace, l.name, err)
	}
	return nil
}
