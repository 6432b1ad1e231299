package addons

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
)

type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Rules []struct {
		APIGroups     []string `yaml:"apiGroups"`
		Resources     []string `yaml:"resources"`
		ResourceNames []string `yaml:"resourceNames"`
		Verbs         []string `yaml:"verbs"`
	} `yaml:"rules"`
	RoleRef struct {
		Kind, Name string
	} `yaml:"roleRef"`
	Subjects []struct {
		Kind, Name string
	} `yaml:"subjects"`
}

// objects reads a manifest by kind, in order, after checking that the
// client that applies it (kubeclient.ApplyManifest) takes every object.
func objects(t *testing.T, manifest []byte) map[string][]object {
	t.Helper()
	_, err := kubeclient.ParseManifest(manifest)
	require.NoError(t, err, "kubeclient applies it")
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	byKind := map[string][]object{}
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return byKind
		}
		require.NoError(t, err)
		if o.Kind != "" {
			byKind[o.Kind] = append(byKind[o.Kind], o)
		}
	}
}

// The manifest every node's rights to the record come from names the
// very record pkg/node/kube/rollout uses and lets every node read it, and
// nothing more: no node writes it, and there is no shared lock.
func TestUpgradesManifest(t *testing.T) {
	byKind := objects(t, Upgrades)
	require.Len(t, byKind, 3, "the record, a Role and its RoleBinding")
	require.Len(t, byKind["ConfigMap"], 1)
	assert.Equal(t, rollout.ConfigMapName, byKind["ConfigMap"][0].Metadata.Name)
	assert.Equal(t, rollout.Namespace, byKind["ConfigMap"][0].Metadata.Namespace)

	require.Len(t, byKind["Role"], 1)
	role := byKind["Role"][0]
	require.Len(t, role.Rules, 1)
	assert.Equal(t, []string{""}, role.Rules[0].APIGroups)
	assert.Equal(t, []string{"configmaps"}, role.Rules[0].Resources)
	assert.Equal(t, []string{rollout.ConfigMapName}, role.Rules[0].ResourceNames)
	assert.Equal(t, []string{"get"}, role.Rules[0].Verbs, "no update, no create, no delete, no list")
	require.Len(t, byKind["RoleBinding"], 1)
	rb := byKind["RoleBinding"][0]
	assert.Equal(t, role.Metadata.Name, rb.RoleRef.Name)
	require.Len(t, rb.Subjects, 1)
	assert.Equal(t, "Group", rb.Subjects[0].Kind)
	assert.Equal(t, "system:nodes", rb.Subjects[0].Name)
}

// Each node gets its own status object and a Role and RoleBinding that
// grant exactly its own user get and update of exactly that object.
func TestNodeUpgradeStatus(t *testing.T) {
	for _, tt := range []struct {
		name  string
		nodes []string
	}{
		{"one node", []string{"cp-1"}},
		{"a cluster", []string{"cp-1", "cp-2", "w-1", "worker.site-3"}},
		{"no nodes", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NodeUpgradeStatus(tt.nodes)
			require.NoError(t, err)
			byKind := objects(t, m)
			require.Len(t, byKind["ConfigMap"], len(tt.nodes))
			require.Len(t, byKind["Role"], len(tt.nodes))
			require.Len(t, byKind["RoleBinding"], len(tt.nodes))
			for i, n := range tt.nodes {
				cm, role, rb := byKind["ConfigMap"][i], byKind["Role"][i], byKind["RoleBinding"][i]
				assert.Equal(t, "terrarium-upgrade-status-"+n, cm.Metadata.Name)
				assert.Equal(t, rollout.StatusName(n), cm.Metadata.Name)
				for _, o := range []object{cm, role, rb} {
					assert.Equal(t, "kube-system", o.Metadata.Namespace)
				}

				assert.Equal(t, "terrarium:upgrade-status:"+n, role.Metadata.Name)
				require.Len(t, role.Rules, 1, "one rule")
				rule := role.Rules[0]
				assert.Equal(t, []string{""}, rule.APIGroups)
				assert.Equal(t, []string{"configmaps"}, rule.Resources)
				assert.Equal(t, []string{rollout.StatusName(n)}, rule.ResourceNames, "its own object alone")
				assert.Equal(t, []string{"get", "update"}, rule.Verbs, "no create, patch, delete, list or watch")

				assert.Equal(t, role.Metadata.Name, rb.Metadata.Name)
				assert.Equal(t, "Role", rb.RoleRef.Kind)
				assert.Equal(t, role.Metadata.Name, rb.RoleRef.Name)
				require.Len(t, rb.Subjects, 1, "one subject")
				assert.Equal(t, "User", rb.Subjects[0].Kind)
				assert.Equal(t, "system:node:"+n, rb.Subjects[0].Name, "the node's kubelet, not the group of all nodes")
			}
		})
	}
}

// The older release's write of the record and the lock goes to one
// node's user, or to no one.
func TestLegacyUpgradeGrant(t *testing.T) {
	for _, tt := range []struct {
		node string
		want []string
	}{
		{"w-1", []string{"User system:node:w-1"}},
		{"", nil},
	} {
		t.Run("node "+tt.node, func(t *testing.T) {
			m, err := LegacyUpgradeGrant(tt.node)
			require.NoError(t, err)
			byKind := objects(t, m)
			require.Len(t, byKind["ConfigMap"], 1)
			assert.Equal(t, rollout.LockName, byKind["ConfigMap"][0].Metadata.Name, "the lock an older node cannot create")
			require.Len(t, byKind["Role"], 1)
			require.Len(t, byKind["Role"][0].Rules, 1)
			assert.Equal(t, []string{rollout.ConfigMapName, rollout.LockName}, byKind["Role"][0].Rules[0].ResourceNames)
			assert.Equal(t, []string{"get", "update"}, byKind["Role"][0].Rules[0].Verbs)
			require.Len(t, byKind["RoleBinding"], 1)
			var got []string
			for _, s := range byKind["RoleBinding"][0].Subjects {
				got = append(got, s.Kind+" "+s.Name)
			}
			assert.Equal(t, tt.want, got)
			if tt.node == "" {
				assert.Contains(t, string(m), "subjects: []", "applied, it takes the subject an earlier apply gave")
			}
		})
	}
}

// A name that is no node's is refused: it could name another object or
// another user.
func TestUpgradeRBACRefusesOddNames(t *testing.T) {
	for _, n := range []string{"", "W-1", "w-1,system:masters", "-w", "w.", "a b", "../x", "w:1"} {
		_, err := NodeUpgradeStatus([]string{"cp-1", n})
		assert.ErrorContains(t, err, "is not a node name", "%q", n)
		if n != "" {
			_, err = LegacyUpgradeGrant(n)
			assert.ErrorContains(t, err, "is not a node name", "%q", n)
		}
	}
}
