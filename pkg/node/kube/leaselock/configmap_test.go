package leaselock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// fakeConfigMaps keeps ConfigMaps as the API does: every write gets a new
// resourceVersion, a write at an old one is a conflict, and errors come
// wrapped as kubeclient wraps them.
type fakeConfigMaps struct {
	mu      sync.Mutex
	maps    map[string]kubeclient.ConfigMap
	version int
}

func (f *fakeConfigMaps) ConfigMap(ctx context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.maps[ns+"/"+name]
	if !ok {
		return kubeclient.ConfigMap{}, fmt.Errorf("read configmap %s/%s: %w", ns, name, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"})
	}
	return m, nil
}

func (f *fakeConfigMaps) CreateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.maps[m.Namespace+"/"+m.Name]; ok {
		return kubeclient.ConfigMap{}, fmt.Errorf("create configmap: %w", &kubeclient.StatusError{Code: 409, Status: "409 Conflict"})
	}
	return f.write(m), nil
}

func (f *fakeConfigMaps) UpdateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, ok := f.maps[m.Namespace+"/"+m.Name]
	if !ok {
		return kubeclient.ConfigMap{}, fmt.Errorf("update configmap: %w", &kubeclient.StatusError{Code: 404, Status: "404 Not Found"})
	}
	if cur.ResourceVersion != m.ResourceVersion {
		return kubeclient.ConfigMap{}, fmt.Errorf("update configmap: %w", &kubeclient.StatusError{Code: 409, Status: "409 Conflict"})
	}
	return f.write(m), nil
}

func (f *fakeConfigMaps) write(m kubeclient.ConfigMap) kubeclient.ConfigMap {
	f.version++
	m.ResourceVersion = strconv.Itoa(f.version)
	f.maps[m.Namespace+"/"+m.Name] = m
	return m
}

// The rollout's lock, taken with kubelets' credentials, lives in a
// ConfigMap: the one the cluster's manifest creates, empty, is a free
// lock; three nodes take it one at a time; it is left free, its fields
// readable as a Lease's.
func TestLockInAConfigMap(t *testing.T) {
	api := &fakeConfigMaps{maps: map[string]kubeclient.ConfigMap{}}
	_, err := api.CreateConfigMap(context.Background(), kubeclient.ConfigMap{Namespace: "kube-system", Name: "etcd-join"})
	require.NoError(t, err)
	store := InConfigMap(api)

	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for _, id := range []string{"cp-1", "w-1", "w-2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := newLock(t, store, id, WithDuration(90*time.Second)).Do(context.Background(), func(ctx context.Context) error {
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				time.Sleep(10 * time.Millisecond)
				inside.Add(-1)
				return nil
			})
			assert.NoError(t, err, id)
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 1, most.Load(), "holders at once")

	l, err := store.Lease(context.Background(), "kube-system", "etcd-join")
	require.NoError(t, err)
	assert.Empty(t, l.Holder, "left free")
	assert.Equal(t, 90, l.DurationSeconds)
	assert.Equal(t, 3, l.Transitions, "taken three times")
	assert.False(t, l.RenewTime.IsZero())
	m, err := api.ConfigMap(context.Background(), "kube-system", "etcd-join")
	require.NoError(t, err)
	assert.Equal(t, "90", m.Data["leaseDurationSeconds"])
}

// With no ConfigMap at all the lock creates it, as with a Lease; one that
// holds nonsense reads as a free lock of the lock's own duration.
func TestLockInAConfigMapCreatedOrMalformed(t *testing.T) {
	api := &fakeConfigMaps{maps: map[string]kubeclient.ConfigMap{}}
	store := InConfigMap(api)
	require.NoError(t, newLock(t, store, "cp-1").Do(context.Background(), func(context.Context) error { return nil }))
	m, err := api.ConfigMap(context.Background(), "kube-system", "etcd-join")
	require.NoError(t, err)
	assert.Equal(t, "", m.Data["holderIdentity"])

	api.maps["kube-system/etcd-join"] = kubeclient.ConfigMap{Namespace: "kube-system", Name: "etcd-join", ResourceVersion: "7",
		Data: map[string]string{"leaseDurationSeconds": "soon", "renewTime": "yesterday", "leaseTransitions": "-"}}
	l, err := store.Lease(context.Background(), "kube-system", "etcd-join")
	require.NoError(t, err)
	assert.Equal(t, kubeclient.Lease{Namespace: "kube-system", Name: "etcd-join", ResourceVersion: "7"}, l)
	require.NoError(t, newLock(t, store, "w-1").Do(context.Background(), func(context.Context) error { return nil }))
}
