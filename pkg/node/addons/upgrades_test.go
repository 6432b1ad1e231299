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
// no node more than reading and updating those two objects by name.
func TestUpgradesManifest(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader(Upgrades))
	byKind := map[string]object{}
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		byKind[o.Kind] = o
	}
	require.Len(t, byKind, 4)
	assert.Equal(t, rollout.ConfigMapName, byKind["ConfigMap"].Metadata.Name)
	assert.Equal(t, rollout.Namespace, byKind["ConfigMap"].Metadata.Namespace)
	assert.Equal(t, rollout.LeaseName, byKind["Lease"].Metadata.Name)
	assert.Equal(t, rollout.Namespace, byKind["Lease"].Metadata.Namespace)

	role := byKind["Role"]
	require.Len(t, role.Rules, 2)
	assert.Equal(t, []string{rollout.ConfigMapName}, role.Rules[0].ResourceNames)
	assert.Equal(t, []string{rollout.LeaseName}, role.Rules[1].ResourceNames)
	for _, r := range role.Rules {
		assert.Equal(t, []string{"get", "update"}, r.Verbs, "no create, no delete, no list")
	}
	require.Len(t, byKind["RoleBinding"].Subjects, 1)
	assert.Equal(t, "system:nodes", byKind["RoleBinding"].Subjects[0].Name)
}
