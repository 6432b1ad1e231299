package rollout

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	t0      = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	v020    = Upgrade{Digest: "sha256:aa", Version: "0.2.0", Kubernetes: "v1.34.2", Ref: "terrarium/upgrade@sha256:11"}
	v021    = Upgrade{Digest: "sha256:bb", Version: "0.2.1", Ref: "terrarium/upgrade@sha256:22"}
	members = []Member{{Name: "w-2"}, {Name: "cp-2", ControlPlane: true}, {Name: "w-1"}, {Name: "cp-1", ControlPlane: true}}
)

func names(ro *Rollout) []string {
	var out []string
	for _, n := range ro.Nodes {
		out = append(out, n.Name+":"+n.Phase)
	}
	return out
}

func TestStartOrdersControlPlanesFirst(t *testing.T) {
	var r Record
	require.NoError(t, r.Start(v020, members, "w-1", t0))
	assert.Equal(t, []string{"cp-1:waiting", "cp-2:waiting", "w-1:waiting", "w-2:waiting"}, names(r.Rollout))
	assert.Equal(t, Rolling, r.Rollout.Phase)
	assert.Equal(t, "w-1", r.Rollout.StartedBy)
	n, ok := r.Turn()
	require.True(t, ok)
	assert.Equal(t, "cp-1", n.Name)
	assert.Equal(t, "0.2.0: rolling, 0 of 4 nodes done, cp-1 waiting", r.Summary())

	// The same upgrade again (its stick put into another node) changes nothing.
	require.NoError(t, r.Set(v020.Digest, "cp-1", NodeDraining, "", t0.Add(time.Minute)))
	require.NoError(t, r.Start(v020, members, "w-2", t0.Add(2*time.Minute)))
	assert.Equal(t, "w-1", r.Rollout.StartedBy)
	assert.Equal(t, "cp-1:draining", names(r.Rollout)[0])

	// Another one waits for it.
	err := r.Start(v021, members, "w-2", t0)
	assert.ErrorIs(t, err, ErrBusy)
	assert.ErrorContains(t, err, "0.2.0, started by w-1 at 2026-11-26T10:00:00Z")
	assert.Equal(t, v020.Digest, r.Rollout.Digest)

	require.Error(t, new(Record).Start(v020, nil, "w-1", t0), "no members")
}

func TestRollingToTheEnd(t *testing.T) {
	var r Record
	require.NoError(t, r.Start(v020, members[:2], "cp-2", t0))
	for _, name := range []string{"cp-2", "w-2"} {
		n, ok := r.Turn()
		require.True(t, ok)
		assert.Equal(t, name, n.Name)
		for _, p := range []string{NodeDraining, NodeInstalling, NodeTrial, NodeDone} {
			require.NoError(t, r.Set(v020.Digest, name, p, "", t0))
		}
	}
	_, ok := r.Turn()
	assert.False(t, ok)
	assert.Equal(t, Done, r.Rollout.Phase)
	assert.Equal(t, "0.2.0: done, 2 of 2 nodes done", r.Summary())
	assert.Empty(t, r.Bad)

	// Once done, the next upgrade may start.
	require.NoError(t, r.Start(v021, members[:2], "cp-2", t0))
	assert.Equal(t, v021.Digest, r.Rollout.Digest)
}

func TestFailureStopsTheRollout(t *testing.T) {
	for _, tt := range []struct {
		phase   string
		wantBad bool
	}{
		{NodeFailed, false},
		{NodeRolledBack, true},
	} {
		t.Run(tt.phase, func(t *testing.T) {
			var r Record
			require.NoError(t, r.Start(v020, members, "cp-1", t0))
			require.NoError(t, r.Set(v020.Digest, "cp-1", NodeDone, "", t0))
			require.NoError(t, r.Set(v020.Digest, "cp-2", tt.phase, "health check: etcd unhealthy", t0.Add(time.Hour)))
			assert.Equal(t, Stopped, r.Rollout.Phase)
			assert.Equal(t, "cp-2 "+tt.phase+": health check: etcd unhealthy", r.Rollout.Reason)
			_, ok := r.Turn()
			assert.False(t, ok, "no node's turn in a stopped rollout")
			assert.Equal(t, "0.2.0: stopped, 1 of 4 nodes done (cp-2 "+tt.phase+": health check: etcd unhealthy)", r.Summary())
			if !tt.wantBad {
				assert.Nil(t, r.BadUpgrade(v020.Digest))
				require.NoError(t, r.Start(v020, members, "cp-1", t0), "a failed drain may be retried")
				return
			}
			assert.Equal(t, &Bad{Digest: v020.Digest, Version: "0.2.0", Node: "cp-2", Reason: "health check: etcd unhealthy",
				At: t0.Add(time.Hour)}, r.BadUpgrade(v020.Digest))
			err := r.Start(v020, members, "w-1", t0)
			assert.ErrorIs(t, err, ErrBad)
			assert.ErrorContains(t, err, "0.2.0 rolled back on cp-2 at 2026-11-26T11:00:00Z (health check: etcd unhealthy)")
			forced := v020
			forced.Instructions = Instructions{Manifest: "{}", ManifestSignature: "sig", Force: "force"}
			require.NoError(t, r.Start(forced, members, "w-1", t0), "forced")
			assert.Nil(t, r.BadUpgrade(v020.Digest), "forcing clears the mark")
			assert.Equal(t, Rolling, r.Rollout.Phase)
			assert.True(t, r.Rollout.Forced)
			require.NotNil(t, r.Instructions)
			assert.Equal(t, Instructions{Digest: v020.Digest, Manifest: "{}", ManifestSignature: "sig", Force: "force"}, *r.Instructions,
				"the instructions go with the rollout, naming its upgrade")
		})
	}
}

func TestSetOutsideTheRollout(t *testing.T) {
	var r Record
	// A node that installed an upgrade from its own stick, with no rollout,
	// still marks its rollback bad for the cluster.
	require.NoError(t, r.Set(v021.Digest, "w-1", NodeRolledBack, "kubelet failed", t0))
	require.NotNil(t, r.BadUpgrade(v021.Digest))
	require.NoError(t, r.Set(v021.Digest, "w-1", NodeRolledBack, "again", t0))
	assert.Len(t, r.Bad, 1, "marked once")

	require.NoError(t, r.Start(v020, members, "cp-1", t0))
	require.NoError(t, r.Set(v021.Digest, "cp-1", NodeDone, "", t0), "another upgrade's report")
	assert.Equal(t, NodeWaiting, r.Rollout.Nodes[0].Phase)
	assert.ErrorIs(t, r.Set(v020.Digest, "stranger", NodeDone, "", t0), errNotInRollout)
}
