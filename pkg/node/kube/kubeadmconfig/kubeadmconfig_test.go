package kubeadmconfig

import (
	"encoding/base64"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// testKey is a secrets encryption key: 32 bytes, base64.
var testKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// cluster is a node's cluster section as imagebuild config cluster makes
// it: control planes hold the secrets encryption key.
func cluster(role, ip string) *machineconfig.Cluster {
	c := &machineconfig.Cluster{
		Name: "lab", Role: role, NodeIP: ip, ControlPlanes: []string{"10.77.0.10", "10.77.0.11"},
		PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12",
		Token: "abcdef.0123456789abcdef", TokenExpires: now.Add(24 * time.Hour),
		CACertHash: "sha256:" + strings.Repeat("ab", 32),
	}
	if c.IsControlPlane() {
		c.SecretsEncryptionKey = testKey
	}
	return c
}

// golden compares got with testdata/name, which -update rewrites.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "differs from %s (run with -update to accept)", path)
}

func TestRender(t *testing.T) {
	for _, tt := range []struct {
		name, role, ip string
		noKey          bool
	}{
		{"init", machineconfig.RoleInit, "10.77.0.10", false},
		// A cluster config from before the secrets encryption key.
		{"init-no-encryption-key", machineconfig.RoleInit, "10.77.0.10", true},
		{"controlplane", machineconfig.RoleControlPlane, "10.77.0.11", false},
		{"worker", machineconfig.RoleWorker, "10.77.0.20", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := cluster(tt.role, tt.ip)
			if tt.noKey {
				c.SecretsEncryptionKey = ""
			}
			got, err := Render(Input{Cluster: c, NodeName: "node-" + strings.TrimSuffix(tt.name, "-no-encryption-key"), KubernetesVersion: "v1.36.3", PodResolvConf: "/etc/terrarium/pod-resolv.conf", Now: now})
			if err != nil {
				t.Fatal(err)
			}
			// Every document is YAML with the kind kubeadm expects.
			dec := yaml.NewDecoder(strings.NewReader(string(got)))
			var kinds []string
			for {
				var doc map[string]any
				if err := dec.Decode(&doc); err != nil {
					break
				}
				kinds = append(kinds, doc["kind"].(string))
			}
			want := "JoinConfiguration"
			if tt.role == machineconfig.RoleInit {
				want = "InitConfiguration,ClusterConfiguration,KubeletConfiguration,KubeProxyConfiguration"
			}
			if strings.Join(kinds, ",") != want {
				t.Errorf("documents %v, want %s", kinds, want)
			}
			golden(t, tt.name+".yaml", got)
		})
	}
}

func TestRenderTTLAndExpiry(t *testing.T) {
	c := cluster(machineconfig.RoleInit, "10.77.0.10")
	got, err := Render(Input{Cluster: c, NodeName: "cp-1", KubernetesVersion: "v1.36.3", Now: now.Add(23 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), TTLLine+`"1h0m0s"`) {
		t.Errorf("an hour before expiry the TTL line should say 1h:\n%s", got)
	}
	// A later boot of the init node, after the token expired, still
	// renders (to verify the file), never with a TTL of zero ("never").
	late, err := Render(Input{Cluster: c, NodeName: "cp-1", KubernetesVersion: "v1.36.3", Now: now.Add(25 * time.Hour)})
	if err != nil {
		t.Fatalf("rendering after the token expired: %v", err)
	}
	if !strings.Contains(string(late), TTLLine+`"1s"`) {
		t.Errorf("after expiry the TTL line should say 1s:\n%s", late)
	}
}

// TestPatches: each patch names its target's container, etcd requests the
// most CPU of the static pods, and together they request no more than
// kubeadm's own 650m (a node that admitted kubeadm's pods admits these).
func TestPatches(t *testing.T) {
	millicores := func(q string) int {
		t.Helper()
		n, err := strconv.Atoi(strings.TrimSuffix(q, "m"))
		if err != nil || !strings.HasSuffix(q, "m") {
			t.Fatalf("CPU request %q: want millicores like 100m", q)
		}
		return n
	}
	cpu := map[string]int{}
	total := 0
	for name, p := range Patches(EtcdUser{UID: 232, GID: 232}) {
		target, ok := strings.CutSuffix(name, "+strategic.yaml")
		if !ok {
			t.Fatalf("patch %s: want target+strategic.yaml", name)
		}
		var pod struct {
			Spec struct {
				Containers []struct {
					Name      string
					Resources struct{ Requests map[string]string }
				}
			}
		}
		if err := yaml.Unmarshal(p, &pod); err != nil {
			t.Fatalf("patch %s: %v", name, err)
		}
		if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != target {
			t.Fatalf("patch %s: containers %+v, want one named %s", name, pod.Spec.Containers, target)
		}
		cpu[target] = millicores(pod.Spec.Containers[0].Resources.Requests["cpu"])
		total += cpu[target]
	}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if cpu[c] == 0 || cpu[c] >= cpu["etcd"] {
			t.Errorf("%s requests %dm, etcd %dm: want etcd's the largest request", c, cpu[c], cpu["etcd"])
		}
	}
	if total > 650 {
		t.Errorf("the static pods request %dm in all, more than kubeadm's 650m", total)
	}
}

// TestPatchesGolden pins the patches (testdata/patches; -update rewrites
// them), and etcd alone runs as its own user: unprivileged, without
// capabilities; the others keep kubeadm's (root, which reads the PKI).
func TestPatchesGolden(t *testing.T) {
	for name, p := range Patches(EtcdUser{UID: 232, GID: 233}) {
		golden(t, filepath.Join("patches", name), p)
		var pod struct {
			Spec struct {
				Containers []struct {
					SecurityContext map[string]any `yaml:"securityContext"`
				}
			}
		}
		require.NoError(t, yaml.Unmarshal(p, &pod), name)
		require.Len(t, pod.Spec.Containers, 1, name)
		sc := pod.Spec.Containers[0].SecurityContext
		if name != "etcd+strategic.yaml" {
			assert.Nil(t, sc, name)
			continue
		}
		assert.Equal(t, map[string]any{
			"runAsUser": 232, "runAsGroup": 233, "runAsNonRoot": true, "allowPrivilegeEscalation": false,
			"capabilities": map[string]any{"drop": []any{"ALL"}},
		}, sc)
	}
	root := Patches(EtcdUser{})
	assert.NotContains(t, string(root["etcd+strategic.yaml"]), "securityContext", "etcd as kubeadm runs it: root")
	assert.Contains(t, string(root["etcd+strategic.yaml"]), "failureThreshold: 90", "with the patient probes still")
}
