package firstboot

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withFakeMembers makes the env's etcdctl know three members cp-1..cp-3
// (IDs 1 to 3), answer health checks for the client URLs in up, and
// record the IDs it removes.
func withFakeMembers(e *env, up ...string) *[]string {
	var removed []string
	inner := e.hostExec
	if inner == nil {
		inner = e.exec
	}
	e.hostExec = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name != "etcdctl" {
			return inner(ctx, name, args...)
		}
		line := strings.Join(args, " ")
		switch {
		case strings.Contains(line, " member list"):
			return []byte(`{"members":[` +
				`{"ID":1,"name":"cp-1","peerURLs":["https://10.77.0.10:2380"],"clientURLs":["https://10.77.0.10:2379"]},` +
				`{"ID":2,"name":"cp-2","peerURLs":["https://10.77.0.11:2380"],"clientURLs":["https://10.77.0.11:2379"]},` +
				`{"ID":3,"name":"cp-3","peerURLs":["https://10.77.0.12:2380"],"clientURLs":["https://10.77.0.12:2379"]}]}`), nil
		case strings.Contains(line, " endpoint health"):
			for _, u := range up {
				if strings.Contains(line, "--endpoints="+u+" ") {
					return []byte(u + " is healthy"), nil
				}
			}
			return []byte("unhealthy"), errors.New("exit status 1")
		case strings.Contains(line, " member remove "):
			removed = append(removed, args[len(args)-1])
			return nil, nil
		}
		return inner(ctx, name, args...)
	}
	return &removed
}

// A lost control plane is removed from etcd and its Node deleted; one
// that answers, or a name the cluster does not know, changes nothing; a
// worker has no member, only its Node.
func TestRemoveNode(t *testing.T) {
	const cp1, cp2, cp3 = "https://10.77.0.10:2379", "https://10.77.0.11:2379", "https://10.77.0.12:2379"
	for _, tc := range []struct {
		name, remove string
		up           []string
		removed      []string
		deleted      []string
		err          string
	}{
		{name: "a lost control plane", remove: "cp-2", up: []string{cp1, cp3}, removed: []string{"2"}, deleted: []string{"cp-2"}},
		{name: "a control plane that answers", remove: "cp-2", up: []string{cp1, cp2, cp3}, err: "etcd member cp-2 answers"},
		{name: "quorum lost", remove: "cp-2", up: []string{cp1}, err: "etcd has lost its quorum"},
		{name: "a worker", remove: "w-1", up: []string{cp1, cp3}, deleted: []string{"w-1"}},
		{name: "unknown", remove: "w-9", up: []string{cp1, cp3}, err: "w-9 is neither an etcd member nor a Node of this cluster"},
		{name: "this node", remove: "cp-1", up: []string{cp1, cp3}, err: "cp-1 is this node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := clusterEnv(t, "")
			e.nodes = []string{"cp-1", "cp-2", "cp-3", "w-1"}
			config := clusterConfigWith(t, "cp-1", 3)
			require.NoError(t, e.run(config), e.console.String())
			removed := withFakeMembers(e, tc.up...)

			res, err := RemoveNode(context.Background(), e.options(staticSource(config)), tc.remove)
			assert.Equal(t, tc.removed, *removed, "etcd members removed")
			e.mu.Lock()
			deleted := slices.Clone(e.deletedNodes)
			e.mu.Unlock()
			assert.Equal(t, tc.deleted, deleted, "Nodes deleted")
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.True(t, res.NodeDeleted)
			assert.Contains(t, res.String(), "A new machine booted with "+tc.remove+"'s config disk joins in its place")
		})
	}
}

func TestRemoveNodeOnlyOnAControlPlane(t *testing.T) {
	e, _ := clusterEnv(t, "")
	config := clusterConfig(t, "w-1")
	require.NoError(t, e.run(config), e.console.String())
	removed := withFakeMembers(e)
	_, err := RemoveNode(context.Background(), e.options(staticSource(config)), "cp-1")
	assert.ErrorContains(t, err, "this node runs no etcd member")
	assert.Empty(t, *removed)
}
