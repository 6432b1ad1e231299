package leaselock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// fakeStore keeps Leases as the API does: every write gets a new
// resourceVersion, and a write at an old one is a conflict.
type fakeStore struct {
	mu      sync.Mutex
	leases  map[string]kubeclient.Lease
	version int
	// failReads makes the next reads fail, like an API server that does
	// not answer.
	failReads int
	// failWrites makes the next updates fail the same way.
	failWrites int
}

func newFakeStore() *fakeStore { return &fakeStore{leases: map[string]kubeclient.Lease{}} }

func (f *fakeStore) Lease(ctx context.Context, ns, name string) (kubeclient.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failReads > 0 {
		f.failReads--
		// Texts vary, as a loaded API server's failures do.
		return kubeclient.Lease{}, fmt.Errorf("GET leases: TLS handshake timeout (%d)", f.failReads)
	}
	l, ok := f.leases[ns+"/"+name]
	if !ok {
		return kubeclient.Lease{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	return l, nil
}

func (f *fakeStore) CreateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := l.Namespace + "/" + l.Name
	if _, ok := f.leases[key]; ok {
		return kubeclient.Lease{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return f.write(key, l), nil
}

func (f *fakeStore) UpdateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWrites > 0 {
		f.failWrites--
		return kubeclient.Lease{}, fmt.Errorf("PUT leases: context deadline exceeded (%d)", f.failWrites)
	}
	key := l.Namespace + "/" + l.Name
	cur, ok := f.leases[key]
	if !ok {
		return kubeclient.Lease{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	if cur.ResourceVersion != l.ResourceVersion {
		return kubeclient.Lease{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return f.write(key, l), nil
}

func (f *fakeStore) write(key string, l kubeclient.Lease) kubeclient.Lease {
	f.version++
	l.ResourceVersion = strconv.Itoa(f.version)
	f.leases[key] = l
	return l
}

func (f *fakeStore) failNextWrites(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWrites = n
}

// recordEvents is a WithReport function that keeps the events, in order.
func recordEvents() (*[]string, Option) {
	var events []string
	return &events, WithReport(func(ev, detail string) { events = append(events, ev) })
}

func (f *fakeStore) get(name string) kubeclient.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leases["kube-system/"+name]
}

func newLock(t *testing.T, s Store, identity string, opts ...Option) *Lock {
	t.Helper()
	l, err := New(s, "kube-system", "etcd-join", identity, append([]Option{WithPoll(time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Three control planes reach their etcd join at once: one at a time runs.
func TestOneHolderAtATime(t *testing.T) {
	store := newFakeStore()
	var inside, most atomic.Int32
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{"cp-1", "cp-2", "cp-3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := newLock(t, store, id).Do(context.Background(), func(ctx context.Context) error {
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				order = append(order, id)
				mu.Unlock()
				inside.Add(-1)
				return nil
			})
			if err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d holders ran at once, want 1", most.Load())
	}
	if len(order) != 3 {
		t.Errorf("ran %v, want all three", order)
	}
	if l := store.get("etcd-join"); l.Holder != "" {
		t.Errorf("lease left held by %q", l.Holder)
	}
}

// A holder that died (a power cut) never renews: the lease is taken once
// it has been seen unchanged for its duration on the waiter's clock, and
// not before.
func TestDeadHolderExpires(t *testing.T) {
	store := newFakeStore()
	store.write("kube-system/etcd-join", kubeclient.Lease{Namespace: "kube-system", Name: "etcd-join",
		Holder: "cp-9", DurationSeconds: 60,
		// The dead holder's clock was a year ahead: the waiter must not
		// trust it.
		RenewTime: time.Now().Add(365 * 24 * time.Hour)})
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(1_800_000_000+clock.Load(), 0) }
	var events []string
	var mu sync.Mutex
	report := func(ev, detail string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev+" "+detail)
	}
	ran := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- newLock(t, store, "cp-2", WithClock(now), WithReport(report)).Do(context.Background(), func(ctx context.Context) error {
			close(ran)
			return nil
		})
	}()
	time.Sleep(50 * time.Millisecond)
	clock.Store(59)
	time.Sleep(50 * time.Millisecond)
	select {
	case <-ran:
		t.Fatal("took a lease that had not expired")
	default:
	}
	clock.Store(61)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("did not take an expired lease")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(events) != "[waiting cp-9 acquired cp-2 released ]" {
		t.Errorf("events %q", events)
	}
	if l := store.get("etcd-join"); l.Transitions != 1 || l.Holder != "" {
		t.Errorf("lease after takeover and release: %+v", l)
	}
}

// A live holder renews, so a waiter does not take the lease even after
// its duration.
func TestLiveHolderKeepsTheLease(t *testing.T) {
	store := newFakeStore()
	var inside, most atomic.Int32
	enter := func() func() {
		if n := inside.Add(1); n > most.Load() {
			most.Store(n)
		}
		return func() { inside.Add(-1) }
	}
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = newLock(t, store, "cp-2", WithDuration(time.Second)).Do(context.Background(), func(ctx context.Context) error {
			defer enter()()
			close(started)
			time.Sleep(2500 * time.Millisecond) // more than twice the duration
			return nil
		})
	}()
	<-started
	go func() {
		defer wg.Done()
		_ = newLock(t, store, "cp-3", WithDuration(time.Second), WithPoll(50*time.Millisecond)).Do(context.Background(), func(ctx context.Context) error {
			defer enter()()
			return nil
		})
	}()
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("the waiter took a lease its holder kept renewing")
	}
}

// A node that restarted while holding the lock takes it back at once.
func TestOwnLeaseIsTakenBack(t *testing.T) {
	store := newFakeStore()
	store.write("kube-system/etcd-join", kubeclient.Lease{Namespace: "kube-system", Name: "etcd-join",
		Holder: "cp-2", DurationSeconds: 3600, Transitions: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := newLock(t, store, "cp-2").Do(ctx, func(ctx context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if l := store.get("etcd-join"); l.Transitions != 4 {
		t.Errorf("transitions %d, want 4 (the same holder)", l.Transitions)
	}
}

// An API that does not answer is reported and waited out; fn's error is
// returned and the lock released all the same.
func TestUnansweredAPIAndFailingWork(t *testing.T) {
	store := newFakeStore()
	store.failReads = 3
	events, report := recordEvents()
	boom := errors.New("kubeadm join phase etcd-join: exit status 1")
	err := newLock(t, store, "cp-2", report).Do(context.Background(), func(ctx context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if fmt.Sprint(*events) != "[unreachable acquired released]" {
		t.Errorf("events %v: want one unreachable for the spell of errors, then acquired and released", events)
	}
	if l := store.get("etcd-join"); l.Holder != "" {
		t.Errorf("lease left held by %q", l.Holder)
	}
}

// With KeepAfterFailure, a failed holder keeps the lock: a retry of its own
// takes it back at once, another node waits for it; success releases it.
func TestKeepAfterFailure(t *testing.T) {
	store := newFakeStore()
	events, report := recordEvents()
	boom := errors.New("etcd member added, not promoted")
	err := newLock(t, store, "cp-3", KeepAfterFailure(), report).Do(context.Background(), func(ctx context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if l := store.get("etcd-join"); l.Holder != "cp-3" {
		t.Fatalf("after a failure the lease is held by %q, want cp-3", l.Holder)
	}
	if fmt.Sprint(*events) != "[acquired kept]" {
		t.Errorf("events %v, want [acquired kept]", events)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ran := false
	err = newLock(t, store, "cp-2", KeepAfterFailure()).Do(ctx, func(ctx context.Context) error { ran = true; return nil })
	if ran || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cp-2 ran=%v err=%v while cp-3 kept the lock; want it to wait", ran, err)
	}
	if err := newLock(t, store, "cp-3", KeepAfterFailure()).Do(context.Background(), func(ctx context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if l := store.get("etcd-join"); l.Holder != "" || l.Transitions != 0 {
		t.Errorf("after cp-3's retry succeeded: holder %q transitions %d, want released, and no transition (cp-3 took back its own)", l.Holder, l.Transitions)
	}
}

// A waiter whose context ends gives up with the context's error.
func TestWaitEndsWithContext(t *testing.T) {
	store := newFakeStore()
	store.write("kube-system/etcd-join", kubeclient.Lease{Namespace: "kube-system", Name: "etcd-join", Holder: "cp-1", DurationSeconds: 3600})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := newLock(t, store, "cp-2").Do(ctx, func(ctx context.Context) error {
		t.Error("ran without the lock")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want the context's", err)
	}
	if l := store.get("etcd-join"); l.Holder != "cp-1" {
		t.Errorf("holder %q changed", l.Holder)
	}
}

func TestBadOptions(t *testing.T) {
	for name, opts := range map[string][]Option{
		"short duration": {WithDuration(time.Millisecond)},
		"zero poll":      {WithPoll(0)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(newFakeStore(), "kube-system", "x", "cp-1", opts...); err == nil {
				t.Error("no error")
			}
		})
	}
	if _, err := New(newFakeStore(), "kube-system", "x", ""); err == nil {
		t.Error("no identity accepted")
	}
}

// A release the API times out is retried: the next node need not wait out
// the Lease's duration.
func TestReleaseRetries(t *testing.T) {
	store := newFakeStore()
	events, report := recordEvents()
	err := newLock(t, store, "cp-3", report).Do(context.Background(), func(ctx context.Context) error {
		store.failNextWrites(2)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(*events) != "[acquired release failed release failed released]" {
		t.Errorf("events %v, want two failed releases, then released", events)
	}
	if l := store.get("etcd-join"); l.Holder != "" {
		t.Errorf("lease left held by %q", l.Holder)
	}
}

// Release retries stop once the Lease would have expired anyway.
func TestReleaseGivesUpAtExpiry(t *testing.T) {
	store := newFakeStore()
	events, report := recordEvents()
	start := time.Now()
	err := newLock(t, store, "cp-3", WithDuration(time.Second), WithPoll(100*time.Millisecond), report).Do(context.Background(), func(ctx context.Context) error {
		store.failNextWrites(1000)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("release retried for %s, past the lease's 1 s duration", took)
	}
	if n := len(*events); n < 3 || (*events)[n-1] != "release failed" {
		t.Errorf("events %v, want retries ending in release failed", *events)
	}
}

// A failed renewal is retried at the poll interval, not a third of the
// duration later.
func TestRenewRetriesSoon(t *testing.T) {
	store := newFakeStore()
	var failed atomic.Int32
	report := func(ev, detail string) {
		if ev == "renew failed" {
			failed.Add(1)
		}
	}
	var renewedAfterFailure bool
	err := newLock(t, store, "cp-2", WithDuration(3*time.Second), WithPoll(10*time.Millisecond), WithReport(report)).Do(context.Background(), func(ctx context.Context) error {
		store.mu.Lock()
		store.failWrites = 1
		acquired := store.version
		store.mu.Unlock()
		// The first renewal (at 1 s) fails; without a quick retry the
		// next comes at 2 s.
		time.Sleep(1500 * time.Millisecond)
		store.mu.Lock()
		renewedAfterFailure = store.version > acquired
		store.mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if failed.Load() != 1 || !renewedAfterFailure {
		t.Errorf("%d failed renewals, renewed after the failure: %v; want one failure, then a renewal within 1.5 s", failed.Load(), renewedAfterFailure)
	}
}
