package rollout

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// fakeAPI keeps one ConfigMap as the API server does: versions bump on
// each write, a stale update is a conflict. before runs before each
// write: another node writing meanwhile.
type fakeAPI struct {
	m       *kubeclient.ConfigMap
	version int
	writes  int
	before  func(f *fakeAPI)
}

func (f *fakeAPI) ConfigMap(_ context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	if f.m == nil || ns != Namespace || name != ConfigMapName {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	c := *f.m
	c.Data = map[string]string{}
	for k, v := range f.m.Data {
		c.Data[k] = v
	}
	return c, nil
}

func (f *fakeAPI) save(m kubeclient.ConfigMap) kubeclient.ConfigMap {
	f.version++
	f.writes++
	m.ResourceVersion = fmt.Sprint(f.version)
	f.m = &m
	return m
}

func (f *fakeAPI) CreateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	if f.before != nil {
		f.before(f)
	}
	if f.m != nil {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return f.save(m), nil
}

func (f *fakeAPI) UpdateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	if f.before != nil {
		f.before(f)
	}
	if f.m == nil || f.m.ResourceVersion != m.ResourceVersion {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return f.save(m), nil
}

func TestUpdateCreatesThenUpdates(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	r, err := Load(ctx, api)
	require.NoError(t, err)
	assert.Nil(t, r.Rollout)

	_, err = Update(ctx, api, func(r *Record) error { return r.Start(v020, members, "cp-1", t0) })
	require.NoError(t, err)
	_, err = Update(ctx, api, func(r *Record) error { return r.Set(v020.Digest, "cp-1", NodeDraining, "", t0) })
	require.NoError(t, err)
	assert.Equal(t, 2, api.writes)

	r, err = Load(ctx, api)
	require.NoError(t, err)
	n, ok := r.Turn()
	require.True(t, ok)
	assert.Equal(t, Node{Name: "cp-1", ControlPlane: true, Phase: NodeDraining, At: t0}, n)

	// A refused change writes nothing.
	_, err = Update(ctx, api, func(r *Record) error { return r.Start(v021, members, "w-1", t0) })
	assert.ErrorIs(t, err, ErrBusy)
	assert.Equal(t, 2, api.writes)
}

func TestUpdateDecidesAgainAfterAConflict(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	_, err := Update(ctx, api, func(r *Record) error { return r.Start(v020, members, "cp-1", t0) })
	require.NoError(t, err)

	// cp-1 rolls the upgrade back while w-1 tries to start another: w-1's
	// first write conflicts, and on the record read again its upgrade waits.
	raced := false
	api.before = func(f *fakeAPI) {
		if raced {
			return
		}
		raced = true
		f.before = nil
		m, _ := f.ConfigMap(ctx, Namespace, ConfigMapName)
		r, err := decode(m.Data[dataKey])
		require.NoError(t, err)
		require.NoError(t, r.Set(v020.Digest, "cp-1", NodeRolledBack, "etcd unhealthy", t0))
		// Done: the stopped rollout lets another start, but 0.2.0 is bad.
		b, _ := marshal(r)
		m.Data[dataKey] = b
		f.save(m)
		f.before = nil
	}
	calls := 0
	r, err := Update(ctx, api, func(r *Record) error {
		calls++
		return r.Start(v020, members, "w-1", t0)
	})
	assert.Equal(t, 2, calls, "decided again on the record read again")
	assert.ErrorIs(t, err, ErrBad)
	assert.Equal(t, Stopped, r.Rollout.Phase)
}

func TestUnreadableRecord(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{m: &kubeclient.ConfigMap{Namespace: Namespace, Name: ConfigMapName, ResourceVersion: "1",
		Data: map[string]string{dataKey: "{not json"}}}
	_, err := Load(ctx, api)
	assert.ErrorContains(t, err, "(configmap kube-system/terrarium-upgrades key record.json) is not readable")
	_, err = Update(ctx, api, func(*Record) error { return nil })
	require.Error(t, err)
	assert.Equal(t, "{not json", api.m.Data[dataKey], "left as it was")
}

// The rollout's signed instructions go under a key of their own, which a
// node of an older release keeps when it rewrites record.json with the
// fields it knows; a rollout without them leaves none behind.
func TestInstructionsKeptApart(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	signed := v020
	signed.Instructions = Instructions{Manifest: "{\"version\":\"0.2.0\"}\n", ManifestSignature: "sig", Force: "force"}
	_, err := Update(ctx, api, func(r *Record) error { return r.Start(signed, members, "cp-1", t0) })
	require.NoError(t, err)
	require.Contains(t, api.m.Data, instructionsKey)
	assert.NotContains(t, api.m.Data[dataKey], "manifestSignature")

	// An older node rewrites record.json alone.
	old := *api.m
	old.Data = map[string]string{dataKey: `{"rollout":{"digest":"sha256:aa","version":"0.2.0","phase":"rolling","nodes":[{"name":"cp-1","phase":"draining"}]}}`,
		instructionsKey: api.m.Data[instructionsKey]}
	api.save(old)
	r, err := Load(ctx, api)
	require.NoError(t, err)
	require.NotNil(t, r.Instructions)
	assert.Equal(t, Instructions{Digest: v020.Digest, Manifest: signed.Instructions.Manifest, ManifestSignature: "sig", Force: "force"}, *r.Instructions)

	_, err = Update(ctx, api, func(r *Record) error {
		r.Rollout.Phase = Done
		return r.Start(v021, members, "cp-1", t0)
	})
	require.NoError(t, err)
	assert.NotContains(t, api.m.Data, instructionsKey, "0.2.1 carries none")

	api.m.Data[instructionsKey] = "{"
	_, err = Load(ctx, api)
	assert.ErrorContains(t, err, "the rollout's instructions (configmap kube-system/terrarium-upgrades key instructions.json) are not readable")
}

func TestUpdateUnchangedWritesNothing(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	_, err := Update(ctx, api, func(r *Record) error { return r.Start(v020, members, "cp-1", t0) })
	require.NoError(t, err)
	r, err := Update(ctx, api, func(r *Record) error {
		r.Rollout.Phase = Stopped // not written
		return ErrUnchanged
	})
	require.NoError(t, err)
	assert.Equal(t, 1, api.writes)
	assert.Equal(t, Stopped, r.Rollout.Phase, "what change left, unwritten")
	r, err = Load(ctx, api)
	require.NoError(t, err)
	assert.Equal(t, Rolling, r.Rollout.Phase)
}
