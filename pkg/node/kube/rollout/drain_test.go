package rollout

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// fakeNode is one node's pods as the API shows them: an evicted pod is
// deleting for one more look, then gone. guarded pods are refused by
// their budget as many times as their count says.
type fakeNode struct {
	mu sync.Mutex
	// listFails fails that many lists first.
	listFails int
	pods      []kubeclient.Pod
	guarded   map[string]int
	failing   map[string]error
	cordons   []bool
	evictions []string
}

func (f *fakeNode) Cordon(_ context.Context, name string, u bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cordons = append(f.cordons, u)
	return nil
}

func (f *fakeNode) PodsOn(_ context.Context, node string) ([]kubeclient.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listFails > 0 {
		f.listFails--
		return nil, errors.New("GET /api/v1/pods: context deadline exceeded")
	}
	out := append([]kubeclient.Pod(nil), f.pods...)
	// Pods being deleted are gone at the next look.
	kept := f.pods[:0]
	for _, p := range f.pods {
		if !p.Deleting {
			kept = append(kept, p)
		}
	}
	f.pods = kept
	return out, nil
}

func (f *fakeNode) Evict(_ context.Context, p kubeclient.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evictions = append(f.evictions, p.Name)
	if err := f.failing[p.Name]; err != nil {
		return err
	}
	if f.guarded[p.Name] > 0 {
		f.guarded[p.Name]--
		return &kubeclient.StatusError{Code: 429, Status: "429 Too Many Requests"}
	}
	for i := range f.pods {
		if f.pods[i].Name == p.Name {
			f.pods[i].Deleting = true
			return nil
		}
	}
	return &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
}

func workload() []kubeclient.Pod {
	return []kubeclient.Pod{
		{Namespace: "default", Name: "web-1", Phase: "Running", Controlled: true},
		{Namespace: "default", Name: "web-2", Phase: "Running", Controlled: true},
		{Namespace: "kube-flannel", Name: "flannel-x", Phase: "Running", DaemonSet: true},
		{Namespace: "kube-system", Name: "kube-apiserver-cp-1", Phase: "Running", Mirror: true},
		{Namespace: "default", Name: "job-done", Phase: "Succeeded"},
	}
}

func TestDrainLeavesDaemonSetsAndStaticPods(t *testing.T) {
	f := &fakeNode{pods: append(workload(), kubeclient.Pod{Namespace: "default", Name: "debug", Phase: "Running"}),
		guarded: map[string]int{"web-2": 3}, listFails: 2}
	var lines []string
	err := Drain(context.Background(), f, "w-1", DrainOptions{Poll: time.Millisecond, Report: func(l string) { lines = append(lines, l) }})
	require.NoError(t, err)
	assert.Equal(t, []bool{true}, f.cordons, "cordoned, and left cordoned")
	// web-2's budget refused three times; it was asked again each round.
	assert.Equal(t, []string{"web-1", "web-2", "debug", "web-2", "web-2", "web-2"}, f.evictions)
	var names []string
	for _, p := range f.pods {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"flannel-x", "kube-apiserver-cp-1", "job-done"}, names)
	assert.Contains(t, lines, "draining node w-1: listing its pods: GET /api/v1/pods: context deadline exceeded", "a failed list is tried again")
	assert.Contains(t, lines, "draining node w-1: evicting default/debug, which no controller puts back elsewhere")
	assert.Contains(t, lines, "draining node w-1: waiting for default/debug, default/web-1, default/web-2 (its disruption budget allows no eviction now)")
	assert.Equal(t, "node w-1 drained", lines[len(lines)-1])

	require.NoError(t, Uncordon(context.Background(), f, "w-1"))
	assert.Equal(t, []bool{true, false}, f.cordons)
}

func TestDrainTimesOutOnABudget(t *testing.T) {
	f := &fakeNode{pods: workload(), guarded: map[string]int{"web-2": 1 << 30}}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { now = now.Add(time.Second); return now }
	err := Drain(context.Background(), f, "w-1", DrainOptions{Timeout: 10 * time.Second, Poll: time.Millisecond, Now: clock})
	require.ErrorIs(t, err, ErrDrainTimeout)
	assert.EqualError(t, err, "drain node w-1: after 10s, pods are still on the node: default/web-2 (its disruption budget allows no eviction now)")
}

func TestDrainRetriesAFailingAPIAndStopsWithItsContext(t *testing.T) {
	f := &fakeNode{pods: workload(), failing: map[string]error{"web-1": errors.New("POST …/eviction: context deadline exceeded")}}
	ctx, cancel := context.WithCancel(context.Background())
	var rounds int
	err := Drain(ctx, f, "w-1", DrainOptions{Poll: time.Millisecond, Report: func(l string) {
		rounds++
		assert.Contains(t, l, "default/web-1 (POST …/eviction: context deadline exceeded)")
		cancel()
	}})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, rounds)
}
