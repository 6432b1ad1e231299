package addons

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/node/rollout"
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
	Subjects []struct {
		Kind, Name string
	} `yaml:"subjects"`
}

// The manifest names the very objects pkg/node/rollout uses, and grants
// no node more than reading and updating those two ConfigMaps by name.
// No Lease: the NodeRestriction admission plugin would refuse a node's
// write to it whatever the Role said.
func TestUpgradesManifest(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader(Upgrades))
	byKind := map[string][]object{}
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
	require.Len(t, byKind, 3, "ConfigMaps, a Role and its RoleBinding")
	require.Len(t, byKind["ConfigMap"], 2)
	for i, name := range []string{rollout.ConfigMapName, rollout.LockName} {
		assert.Equal(t, name, byKind["ConfigMap"][i].Metadata.Name)
		assert.Equal(t, rollout.Namespace, byKind["ConfigMap"][i].Metadata.Namespace)
	}

	require.Len(t, byKind["Role"], 1)
	role := byKind["Role"][0]
	require.Len(t, role.Rules, 1)
	assert.Equal(t, []string{""}, role.Rules[0].APIGroups)
	assert.Equal(t, []string{"configmaps"}, role.Rules[0].Resources)
	assert.Equal(t, []string{rollout.ConfigMapName, rollout.LockName}, role.Rules[0].ResourceNames)
	assert.Equal(t, []string{"get", "update"}, role.Rules[0].Verbs, "no create, no delete, no list")
	require.Len(t, byKind["RoleBinding"], 1)
	require.Len(t, byKind["RoleBinding"][0].Subjects, 1)
	assert.Equal(t, "system:nodes", byKind["RoleBinding"][0].Subjects[0].Name)
}
