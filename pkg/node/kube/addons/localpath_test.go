package addons

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestLocalPath(t *testing.T) {
	const image = "docker.io/rancher/local-path-provisioner:v0.0.30"
	m, err := LocalPath(LocalPathInput{Image: image, VolumesDir: "/var/lib/terrarium/volumes"})
	require.NoError(t, err)

	byKind := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(string(m)))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		byKind[doc["kind"].(string)] = doc
	}

	// The StorageClass: the default, local volumes, bound where the pod
	// lands.
	sc := byKind["StorageClass"]
	require.NotNil(t, sc)
	ann := sc["metadata"].(map[string]any)["annotations"].(map[string]any)
	assert.Equal(t, "true", ann["storageclass.kubernetes.io/is-default-class"])
	assert.Equal(t, "local", ann["defaultVolumeType"], "local volumes: the kubelet never makes a missing directory")
	assert.Equal(t, "WaitForFirstConsumer", sc["volumeBindingMode"])
	assert.Equal(t, "rancher.io/local-path", sc["provisioner"])

	// Its configuration: the volume area, our helper program.
	data := byKind["ConfigMap"]["data"].(map[string]any)
	var cfg struct {
		CmdTimeoutSeconds int
		NodePathMap       []struct {
			Node  string
			Paths []string
		}
		SetupCommand, TeardownCommand string
	}
	require.NoError(t, json.Unmarshal([]byte(data["config.json"].(string)), &cfg))
	require.Len(t, cfg.NodePathMap, 1)
	assert.Equal(t, "DEFAULT_PATH_FOR_NON_LISTED_NODES", cfg.NodePathMap[0].Node)
	assert.Equal(t, []string{"/var/lib/terrarium/volumes"}, cfg.NodePathMap[0].Paths)
	assert.Equal(t, "/usr/bin/local-path-volume", cfg.SetupCommand)
	assert.Equal(t, "/usr/bin/local-path-volume", cfg.TeardownCommand)
	assert.Equal(t, 300, cfg.CmdTimeoutSeconds, "a helper pod's start on a busy node takes minutes")
	assert.NotContains(t, data, "setup", "no shell scripts")
	var helper struct {
		Spec struct {
			Containers []struct {
				Image           string
				SecurityContext struct {
					Privileged   *bool
					Capabilities struct{ Drop, Add []string }
				} `yaml:"securityContext"`
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(data["helperPod.yaml"].(string)), &helper))
	require.Len(t, helper.Spec.Containers, 1)
	assert.Equal(t, image, helper.Spec.Containers[0].Image, "the helper runs from the provisioner's own image")
	assert.Nil(t, helper.Spec.Containers[0].SecurityContext.Privileged)
	assert.Equal(t, []string{"ALL"}, helper.Spec.Containers[0].SecurityContext.Capabilities.Drop)

	// The provisioner: kube-system, not root, the bundle's image.
	var dep struct {
		Metadata struct{ Namespace string }
		Spec     struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Image           string
						Command         []string
						SecurityContext struct {
							RunAsNonRoot bool `yaml:"runAsNonRoot"`
							RunAsUser    int  `yaml:"runAsUser"`
						} `yaml:"securityContext"`
					}
				}
			}
		}
	}
	b, err := yaml.Marshal(byKind["Deployment"])
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &dep))
	assert.Equal(t, "kube-system", dep.Metadata.Namespace)
	c := dep.Spec.Template.Spec.Containers[0]
	assert.Equal(t, image, c.Image)
	assert.Contains(t, c.Command, "--helper-image="+image)
	assert.True(t, c.SecurityContext.RunAsNonRoot)
	assert.NotZero(t, c.SecurityContext.RunAsUser)
}

func TestLocalPathDefaultsAndRefusals(t *testing.T) {
	m, err := LocalPath(LocalPathInput{VolumesDir: "/var/lib/terrarium/volumes"})
	require.NoError(t, err)
	assert.Contains(t, string(m), "image: "+DefaultLocalPathImage)

	for _, dir := range []string{"", "relative", "/var/lib/../x"} {
		_, err := LocalPath(LocalPathInput{VolumesDir: dir})
		assert.Error(t, err, "%q", dir)
	}
}
