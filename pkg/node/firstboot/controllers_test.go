package firstboot

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// stuckAPI is a node's API client whose reads of ConfigMaps never answer
// until the node stops: an API server that accepts the connection and
// then says nothing.
type stuckAPI struct {
	rollouts.API
	reads atomic.Int32
}

func (a *stuckAPI) ConfigMap(ctx context.Context, _, _ string) (kubeclient.ConfigMap, error) {
	a.reads.Add(1)
	<-ctx.Done()
	return kubeclient.ConfigMap{}, ctx.Err()
}

// A controller that hangs holds up no other: while the rollout's look at
// the cluster's record hangs, a support stick inserted into the node gets
// its bundle (in a single loop it would wait for the rollout for ever).
func TestHungRolloutHoldsUpNoOther(t *testing.T) {
	_, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	n := newRolloutNode(t, newFakeCluster(), "w-1", pub)
	api, err := n.o.Rollout.API()
	require.NoError(t, err)
	stuck := &stuckAPI{API: api}
	n.o.Rollout.API = func() (rollouts.API, error) { return stuck, nil }

	o := n.o
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	require.Eventually(t, func() bool { return stuck.reads.Load() == 1 }, 10*time.Second, time.Millisecond, "the rollout never looked at the record")

	n.e.mkdir("/stick")
	n.e.media.insert("TERRA-SUPPO", "/dev/sdb1", "/stick")
	require.Eventually(t, stepsSay(n.e, "support bundle=written"), 10*time.Second, time.Millisecond, "no support bundle while the rollout hangs")
	assert.EqualValues(t, 1, stuck.reads.Load(), "the hung look is still the rollout's first")

	cancel()
	require.NoError(t, <-done)
}
