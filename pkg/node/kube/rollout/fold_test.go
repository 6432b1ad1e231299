package rollout

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// The nodes' own reports move the rollout, as a control plane folds them
// in: a node's phases, the turn passing, the end, a stop and a bad mark;
// a report on another rollout or naming another node moves nothing.
func TestFold(t *testing.T) {
	forced := v020
	forced.Instructions = Instructions{Manifest: "{}", ManifestSignature: "sig", Force: "force"}
	start := func(u Upgrade) func(*testing.T) Record {
		return func(t *testing.T) Record {
			var r Record
			require.NoError(t, r.Start(u, members[:2], "cp-2", t0))
			return r
		}
	}
	id := func(r Record) string { return r.Rollout.ID() }
	for _, tt := range []struct {
		name     string
		record   func(*testing.T) Record
		statuses func(r Record) map[string]Status
		changed  bool
		check    func(t *testing.T, r Record)
	}{
		{
			name: "a node draining", record: start(v020),
			statuses: func(r Record) map[string]Status {
				return map[string]Status{"cp-2": {Node: "cp-2", Rollout: id(r), Digest: v020.Digest, Phase: NodeDraining, At: t0}}
			},
			changed: true,
			check: func(t *testing.T, r Record) {
				assert.Equal(t, []string{"cp-2:draining", "w-2:waiting"}, names(r.Rollout))
				assert.Equal(t, []string{"cp-2"}, r.Reporting)
			},
		},
		{
			name: "the turn passes, then the rollout ends", record: start(v020),
			statuses: func(r Record) map[string]Status {
				return map[string]Status{
					"cp-2": {Node: "cp-2", Rollout: id(r), Digest: v020.Digest, Phase: NodeDone, Detail: "runs 0.2.0, blessed", At: t0},
					"w-2":  {Node: "w-2", Rollout: id(r), Digest: v020.Digest, Phase: NodeDone, At: t0.Add(time.Hour)},
				}
			},
			changed: true,
			check: func(t *testing.T, r Record) {
				assert.Equal(t, Done, r.Rollout.Phase)
				assert.Equal(t, []string{"cp-2", "w-2"}, r.Reporting)
			},
		},
		{
			name: "a rollback stops it and marks it bad", record: start(v020),
			statuses: func(r Record) map[string]Status {
				return map[string]Status{"cp-2": {Node: "cp-2", Rollout: id(r), Digest: v020.Digest, Upgrade: "0.2.0", Phase: NodeRolledBack, Detail: "health failed", At: t0}}
			},
			changed: true,
			check: func(t *testing.T, r Record) {
				assert.Equal(t, Stopped, r.Rollout.Phase)
				assert.Equal(t, "cp-2 rolled-back: health failed", r.Rollout.Reason)
				assert.Equal(t, &Bad{Digest: v020.Digest, Version: "0.2.0", Node: "cp-2", Reason: "health failed", At: t0}, r.BadUpgrade(v020.Digest))
			},
		},
		{
			name: "a rollback outside the rollout marks its upgrade bad", record: start(v020),
			statuses: func(Record) map[string]Status {
				return map[string]Status{"w-2": {Node: "w-2", Digest: v021.Digest, Upgrade: "0.2.1", Phase: NodeRolledBack, Detail: "kubelet failed", At: t0}}
			},
			changed: true,
			check: func(t *testing.T, r Record) {
				assert.Equal(t, Rolling, r.Rollout.Phase, "not this rollout's")
				assert.Equal(t, []string{"cp-2:waiting", "w-2:waiting"}, names(r.Rollout))
				assert.Equal(t, &Bad{Digest: v021.Digest, Version: "0.2.1", Node: "w-2", Reason: "kubelet failed", At: t0}, r.BadUpgrade(v021.Digest))
			},
		},
		{
			name: "an earlier rollback of what a forced rollout installs again does not mark it again", record: start(forced),
			statuses: func(Record) map[string]Status {
				return map[string]Status{"cp-2": {Node: "cp-2", Rollout: "sha256:aa@2026-11-01T00:00:00Z", Digest: v020.Digest, Phase: NodeRolledBack, At: t0}}
			},
			changed: true, // cp-2 reports
			check: func(t *testing.T, r Record) {
				assert.Nil(t, r.BadUpgrade(v020.Digest))
				assert.Equal(t, Rolling, r.Rollout.Phase)
			},
		},
		{
			name: "a forced rollout that rolls back again is marked again", record: start(forced),
			statuses: func(r Record) map[string]Status {
				return map[string]Status{"cp-2": {Node: "cp-2", Rollout: id(r), Digest: v020.Digest, Phase: NodeRolledBack, Detail: "again", At: t0}}
			},
			changed: true,
			check: func(t *testing.T, r Record) {
				require.NotNil(t, r.BadUpgrade(v020.Digest))
				assert.Equal(t, Stopped, r.Rollout.Phase)
			},
		},
		{
			name: "a report of an earlier rollout of the same upgrade", record: start(v020),
			statuses: func(Record) map[string]Status {
				return map[string]Status{"cp-2": {Node: "cp-2", Rollout: v020.Digest + "@2026-11-01T00:00:00Z", Digest: v020.Digest, Phase: NodeDone, At: t0}}
			},
			changed: true, // cp-2 reports
			check: func(t *testing.T, r Record) {
				assert.Equal(t, []string{"cp-2:waiting", "w-2:waiting"}, names(r.Rollout))
			},
		},
		{
			name: "a status naming another node", record: start(v020),
			statuses: func(r Record) map[string]Status {
				return map[string]Status{"w-2": {Node: "cp-2", Rollout: id(r), Digest: v020.Digest, Phase: NodeDone, At: t0}}
			},
			check: func(t *testing.T, r Record) {
				assert.Equal(t, []string{"cp-2:waiting", "w-2:waiting"}, names(r.Rollout))
				assert.Empty(t, r.Reporting)
			},
		},
		{
			name: "a phase no node has", record: start(v020),
			statuses: func(r Record) map[string]Status {
				return map[string]Status{"cp-2": {Node: "cp-2", Rollout: id(r), Digest: v020.Digest, Phase: "finished", At: t0}}
			},
			changed: true, // cp-2 reports
			check: func(t *testing.T, r Record) {
				assert.Equal(t, []string{"cp-2:waiting", "w-2:waiting"}, names(r.Rollout))
			},
		},
		{
			name: "a node not in the rollout", record: start(v020),
			statuses: func(r Record) map[string]Status {
				return map[string]Status{"w-9": {Node: "w-9", Rollout: id(r), Digest: v020.Digest, Phase: NodeDone, At: t0}}
			},
			changed: true, // w-9 reports
			check: func(t *testing.T, r Record) {
				assert.Equal(t, []string{"cp-2:waiting", "w-2:waiting"}, names(r.Rollout))
			},
		},
		{
			name: "nothing new", record: func(t *testing.T) Record {
				r := start(v020)(t)
				require.NoError(t, r.Set(v020.Digest, "cp-2", NodeDraining, "", t0))
				r.Reporting = []string{"cp-2"}
				return r
			},
			statuses: func(r Record) map[string]Status {
				return map[string]Status{"cp-2": {Node: "cp-2", Rollout: id(r), Digest: v020.Digest, Phase: NodeDraining, At: t0}}
			},
			check: func(t *testing.T, r Record) {
				assert.Equal(t, []string{"cp-2:draining", "w-2:waiting"}, names(r.Rollout))
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.record(t)
			assert.Equal(t, tt.changed, r.Fold(tt.statuses(r)))
			tt.check(t, r)
		})
	}
}

// The record's write goes, for its turn alone, to a node that was never
// seen reporting through its own object (an older release).
func TestLegacyTurn(t *testing.T) {
	var r Record
	assert.Empty(t, r.LegacyTurn(), "no rollout")
	require.NoError(t, r.Start(v020, members[:2], "cp-2", t0))
	assert.Equal(t, "cp-2", r.LegacyTurn())
	r.Fold(map[string]Status{"cp-2": {Node: "cp-2", Version: "0.1.0"}})
	assert.Empty(t, r.LegacyTurn(), "cp-2 reports")
	require.NoError(t, r.Set(v020.Digest, "cp-2", NodeDone, "", t0))
	assert.Equal(t, "w-2", r.LegacyTurn())
	require.NoError(t, r.Set(v020.Digest, "w-2", NodeFailed, "drain", t0))
	assert.Empty(t, r.LegacyTurn(), "stopped")
}

func TestCheckOrder(t *testing.T) {
	var r Record
	require.NoError(t, r.Start(v020, members, "cp-1", t0))
	good := r.Rollout.Nodes
	for _, tt := range []struct {
		name         string
		nodes        []Node
		me           string
		controlPlane bool
		want         string
	}{
		{"a control plane", good, "cp-2", true, ""},
		{"a worker", good, "w-1", false, ""},
		{"a worker listed as a control plane", good, "w-1", true, "the rollout lists this node (w-1) as a worker, which it is not"},
		{"a control plane listed as a worker", []Node{good[0], {Name: "w-0"}, good[2], good[3]}, "w-0", true, "lists this node (w-0) as a worker"},
		{"a worker before the control planes", []Node{good[2], good[0], good[1], good[3]}, "w-1", false, "lists control plane cp-1 after worker w-1: control planes go first"},
		{"not by name", []Node{good[0], good[1], good[3], good[2]}, "w-1", false, "lists w-1 after w-2: each group goes by name"},
		{"twice", []Node{good[0], good[1], good[2], good[2]}, "w-1", false, "lists node w-1 twice"},
		{"left out", good[:3], "w-2", false, "does not list this node (w-2)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ro := *r.Rollout
			ro.Nodes = tt.nodes
			err := ro.CheckOrder(tt.me, tt.controlPlane)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// statusAPI keeps ConfigMaps by name as the API does; writeAs, when set,
// refuses every write but to that one object (a node's rights).
type statusAPI struct {
	cms     map[string]kubeclient.ConfigMap
	version int
	writeAs string
	// conflicts is how many updates to answer with a conflict first.
	conflicts int
}

func (f *statusAPI) ConfigMap(_ context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	m, ok := f.cms[name]
	if !ok || ns != Namespace {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	c := m
	c.Data = map[string]string{}
	for k, v := range m.Data {
		c.Data[k] = v
	}
	return c, nil
}

func (f *statusAPI) CreateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	if f.writeAs != "" {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 403, Status: "403 Forbidden"}
	}
	f.version++
	m.ResourceVersion = fmt.Sprint(f.version)
	f.cms[m.Name] = m
	return m, nil
}

func (f *statusAPI) UpdateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	if f.writeAs != "" && m.Name != f.writeAs {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 403, Status: "403 Forbidden"}
	}
	if f.conflicts > 0 {
		f.conflicts--
		f.version++
		cur := f.cms[m.Name]
		cur.ResourceVersion = fmt.Sprint(f.version)
		f.cms[m.Name] = cur
	}
	if cur, ok := f.cms[m.Name]; !ok || cur.ResourceVersion != m.ResourceVersion {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	f.version++
	m.ResourceVersion = fmt.Sprint(f.version)
	f.cms[m.Name] = m
	return m, nil
}

// A node writes its own status object (after a conflict, on what it
// reads again), which only a control plane creates; a control plane
// reads them all.
func TestStatuses(t *testing.T) {
	ctx := context.Background()
	api := &statusAPI{cms: map[string]kubeclient.ConfigMap{}, writeAs: StatusName("w-1"), version: 10}

	_, err := UpdateStatus(ctx, api, "w-1", func(s *Status) (bool, error) { return true, nil })
	assert.ErrorIs(t, err, ErrNoStatusObject, "a node does not create its object")

	api.cms[StatusName("w-1")] = kubeclient.ConfigMap{Namespace: Namespace, Name: StatusName("w-1"), ResourceVersion: "1"}
	api.cms[StatusName("cp-1")] = kubeclient.ConfigMap{Namespace: Namespace, Name: StatusName("cp-1"), ResourceVersion: "1",
		Data: map[string]string{statusKey: "{not json"}}
	api.conflicts = 1
	calls := 0
	s, err := UpdateStatus(ctx, api, "w-1", func(s *Status) (bool, error) {
		calls++
		s.Version, s.Phase = "0.1.0", NodeWaiting
		return true, nil
	})
	require.NoError(t, err)
	assert.Equal(t, 2, calls, "decided again after the conflict")
	assert.Equal(t, Status{Node: "w-1", Version: "0.1.0", Phase: NodeWaiting}, s)

	before := api.version
	_, err = UpdateStatus(ctx, api, "w-1", func(s *Status) (bool, error) { return false, nil })
	require.NoError(t, err)
	assert.Equal(t, before, api.version, "nothing to write, nothing written")
	boom := errors.New("boom")
	_, err = UpdateStatus(ctx, api, "w-1", func(s *Status) (bool, error) { s.Phase = NodeDone; return true, boom })
	assert.ErrorIs(t, err, boom)

	_, err = UpdateStatus(ctx, api, "cp-1", func(s *Status) (bool, error) { return true, nil })
	assert.ErrorContains(t, err, "write node cp-1's upgrade status", "another node's object")
	assert.ErrorContains(t, err, "403 Forbidden")

	all, missing, err := Statuses(ctx, api, []string{"w-1", "cp-1", "w-2"})
	assert.ErrorContains(t, err, "node cp-1's upgrade status (configmap kube-system/terrarium-upgrade-status-cp-1 key status.json): not readable")
	assert.Equal(t, []string{"cp-1", "w-2"}, missing)
	assert.Equal(t, map[string]Status{"w-1": s}, all)
}

func TestStatusMarks(t *testing.T) {
	var s Status
	b := Bad{Digest: v020.Digest, Version: "0.2.0", Node: "cp-1", Reason: "health failed", At: t0}
	assert.True(t, s.Remember(b))
	assert.False(t, s.Remember(Bad{Digest: v020.Digest, Node: "w-1"}), "once")
	assert.Equal(t, &b, s.BadUpgrade(v020.Digest))
	assert.False(t, s.Forget(v021.Digest))
	assert.True(t, s.Forget(v020.Digest))
	assert.Nil(t, s.BadUpgrade(v020.Digest))
}
