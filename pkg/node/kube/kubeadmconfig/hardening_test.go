package kubeadmconfig

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
)

// docs decodes a multi-document YAML by kind.
func docs(t *testing.T, b []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			break
		}
		out[d["kind"].(string)] = d
	}
	return out
}

// flags is a component's extraArgs as a map, failing on a flag given
// twice.
func flags(t *testing.T, component map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range component["extraArgs"].([]any) {
		m := a.(map[string]any)
		name := m["name"].(string)
		require.NotContains(t, out, name, "flag %s given twice", name)
		out[name] = m["value"].(string)
	}
	return out
}

func renderInit(t *testing.T, key string) map[string]map[string]any {
	t.Helper()
	c := cluster(machineconfig.RoleInit, "10.77.0.10")
	c.SecretsEncryptionKey = key
	b, err := Render(Input{Cluster: c, NodeName: "cp-1", KubernetesVersion: "v1.36.3", PodResolvConf: "/etc/r", Now: now})
	require.NoError(t, err)
	return docs(t, b)
}

// TestRenderedHardening: the init node's ClusterConfiguration and
// KubeletConfiguration hold every setting of docs/security.md, and every
// file a flag names is mounted into kube-apiserver (the golden files pin
// the text; this says what it means).
func TestRenderedHardening(t *testing.T) {
	for _, encrypt := range []bool{true, false} {
		key := ""
		if encrypt {
			key = testKey
		}
		d := renderInit(t, key)
		cc := d["ClusterConfiguration"]
		api := cc["apiServer"].(map[string]any)
		got := flags(t, api)
		want := map[string]string{
			"admission-control-config-file": layout.AdmissionConfigFile, "enable-admission-plugins": "NodeRestriction,EventRateLimit,DenyServiceExternalIPs",
			"audit-policy-file": layout.AuditPolicyFile, "audit-log-path": layout.AuditLogFile,
			"audit-log-maxage": "30", "audit-log-maxbackup": "10", "audit-log-maxsize": "100", "audit-log-compress": "true",
			"kubelet-certificate-authority": layout.KubernetesPKIDir + "/ca.crt",
			"profiling":                     "false", "service-account-extend-token-expiration": "false", "service-account-lookup": "true",
			"tls-cipher-suites": TLSCipherSuites, "tls-min-version": "VersionTLS12",
		}
		if encrypt {
			want["encryption-provider-config"] = layout.EncryptionConfigFile
		}
		assert.Equal(t, want, got, "kube-apiserver's flags, encryption %v", encrypt)

		mounts := map[string]map[string]any{}
		for _, v := range api["extraVolumes"].([]any) {
			m := v.(map[string]any)
			assert.Equal(t, m["hostPath"], m["mountPath"], "mounted where the flag names it")
			mounts[m["hostPath"].(string)] = m
		}
		for _, f := range []string{"admission-control-config-file", "audit-policy-file", "encryption-provider-config"} {
			if p, ok := got[f]; ok {
				require.Contains(t, mounts, p, "--%s names a file kube-apiserver cannot see", f)
				assert.Equal(t, true, mounts[p]["readOnly"], "%s read-only", p)
				assert.Equal(t, "File", mounts[p]["pathType"], "%s: a missing file stops the pod, not the API server's flags", p)
			}
		}
		// kubeadm mounts its certificates directory (k8s-certs), where
		// the kubelets' CA is.
		assert.Equal(t, cc["certificatesDir"], filepath.Dir(got["kubelet-certificate-authority"]))
		logDir := filepath.Dir(got["audit-log-path"])
		require.Contains(t, mounts, logDir)
		assert.Equal(t, false, mounts[logDir]["readOnly"], "the audit log's directory is written")
		fileFlags := 2
		if encrypt {
			fileFlags++
		}
		assert.Len(t, mounts, fileFlags+1, "no other volume (one per file flag, one for the log)")

		for _, component := range []string{"controllerManager", "scheduler"} {
			f := flags(t, cc[component].(map[string]any))
			assert.Equal(t, "false", f["profiling"], component)
			assert.Equal(t, "127.0.0.1", f["bind-address"], component)
			assert.Equal(t, "60s", f["leader-elect-lease-duration"], component)
		}
		assert.Equal(t, "1000", flags(t, cc["controllerManager"].(map[string]any))["terminated-pod-gc-threshold"])
		assert.NotContains(t, flags(t, cc["scheduler"].(map[string]any)), "terminated-pod-gc-threshold")

		k := d["KubeletConfiguration"]
		assert.Equal(t, 0, k["readOnlyPort"])
		assert.Equal(t, map[string]any{"anonymous": map[string]any{"enabled": false}, "webhook": map[string]any{"enabled": true}}, k["authentication"])
		assert.Equal(t, map[string]any{"mode": "Webhook"}, k["authorization"])
		assert.Equal(t, true, k["seccompDefault"])
		assert.Equal(t, true, k["protectKernelDefaults"])
		assert.Equal(t, true, k["serverTLSBootstrap"], "serving certificates of the cluster CA, which kube-apiserver checks")
		assert.Equal(t, true, k["rotateCertificates"])
		assert.NotContains(t, k, "tlsCertFile", "a certificate file would take the place of the requested one")
		assert.Equal(t, "5m0s", k["streamingConnectionIdleTimeout"])
		assert.Equal(t, 4096, k["podPidsLimit"])
		assert.Equal(t, true, k["makeIPTablesUtilChains"])
		assert.Equal(t, 5, k["eventRecordQPS"])
		assert.Equal(t, "VersionTLS12", k["tlsMinVersion"])
		var suites []string
		for _, s := range k["tlsCipherSuites"].([]any) {
			suites = append(suites, s.(string))
		}
		assert.Equal(t, TLSCipherSuites, strings.Join(suites, ","))
	}
}

// LeaderElectionArgs, which the bench's configuration uses, is the
// ClusterConfiguration's leader election.
func TestLeaderElectionArgs(t *testing.T) {
	var list []map[string]string
	require.NoError(t, yaml.Unmarshal([]byte(LeaderElectionArgs), &list))
	var want []map[string]string
	for _, a := range leaderElectionArgs() {
		want = append(want, map[string]string{"name": a.name, "value": a.value})
	}
	assert.Equal(t, want, list)
}

// TestTLSCipherSuites: Go's names of secure suites (what kube-apiserver
// and the kubelet accept), for TLS 1.2, with ECDHE and an AEAD cipher
// each, covering ECDSA and RSA certificates.
func TestTLSCipherSuites(t *testing.T) {
	secure := map[string]*tls.CipherSuite{}
	for _, s := range tls.CipherSuites() {
		secure[s.Name] = s
	}
	aead := regexp.MustCompile(`^TLS_ECDHE_(ECDSA|RSA)_WITH_(AES_(128|256)_GCM_SHA(256|384)|CHACHA20_POLY1305_SHA256)$`)
	kinds := map[string]bool{}
	for _, name := range strings.Split(TLSCipherSuites, ",") {
		s, ok := secure[name]
		require.True(t, ok, "%s is not one of Go's secure suites", name)
		assert.Contains(t, s.SupportedVersions, uint16(tls.VersionTLS12), name)
		m := aead.FindStringSubmatch(name)
		require.NotNil(t, m, "%s is not ECDHE with an AEAD cipher", name)
		kinds[m[1]] = true
	}
	assert.Equal(t, map[string]bool{"ECDSA": true, "RSA": true}, kinds)
}

// TestControlPlaneFiles pins the files a control plane writes
// (testdata/controlplane-files; -update rewrites them): the encryption
// configuration only with a key.
func TestControlPlaneFiles(t *testing.T) {
	c := cluster(machineconfig.RoleControlPlane, "10.77.0.11")
	files, err := ControlPlaneFiles(c)
	require.NoError(t, err)
	var names []string
	for p, b := range files {
		names = append(names, p)
		golden(t, filepath.Join("controlplane-files", filepath.Base(p)), b)
	}
	sort.Strings(names)
	assert.Equal(t, []string{layout.AdmissionConfigFile, layout.AuditPolicyFile, layout.EncryptionConfigFile}, names)

	c.SecretsEncryptionKey = ""
	files, err = ControlPlaneFiles(c)
	require.NoError(t, err)
	assert.NotContains(t, files, layout.EncryptionConfigFile, "no key, no encryption configuration")
	assert.Len(t, files, 2)

	c.SecretsEncryptionKey = "c2hvcnQ="
	_, err = ControlPlaneFiles(c)
	assert.ErrorContains(t, err, "the secrets encryption key is not 32 bytes of base64")
}

// encryptionKeys are the secretbox keys' names of an
// EncryptionConfiguration in order, and whether identity comes last.
func encryptionKeys(t *testing.T, b []byte) ([]string, bool) {
	t.Helper()
	var cfg struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		Resources  []struct {
			Resources []string
			Providers []map[string]struct {
				Keys []struct{ Name, Secret string }
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	assert.Equal(t, "apiserver.config.k8s.io/v1", cfg.APIVersion)
	assert.Equal(t, "EncryptionConfiguration", cfg.Kind)
	require.Len(t, cfg.Resources, 1)
	r := cfg.Resources[0]
	assert.Equal(t, []string{"secrets"}, r.Resources)
	require.Len(t, r.Providers, 2)
	sb, ok := r.Providers[0]["secretbox"]
	require.True(t, ok, "secretbox first: %v", r.Providers)
	var names []string
	for _, k := range sb.Keys {
		name, err := EncryptionKeyName(k.Secret)
		require.NoError(t, err)
		assert.Equal(t, name, k.Name, "a key's name is its hash's")
		assert.Regexp(t, `^key-[0-9a-f]{8}$`, k.Name)
		names = append(names, k.Name)
	}
	_, identity := r.Providers[1]["identity"]
	return names, identity
}

// TestEncryptionConfig: secretbox with the key written with first, then
// the other keys the stage reads, then identity, so that plain Secrets
// stay readable; each stage of a rotation; a stage is found again from
// its file.
func TestEncryptionConfig(t *testing.T) {
	other := base64.StdEncoding.EncodeToString([]byte("another key of thirty-two bytes!"))
	third := base64.StdEncoding.EncodeToString([]byte("a third key, thirty-two bytes..."))
	name := func(k string) string {
		n, err := EncryptionKeyName(k)
		require.NoError(t, err)
		return n
	}
	one := &machineconfig.Cluster{SecretsEncryptionKey: testKey}
	rotated := &machineconfig.Cluster{SecretsEncryptionKey: other, RetiredSecretsEncryptionKeys: []string{testKey, third}}
	tests := []struct {
		c    *machineconfig.Cluster
		st   EncryptionStage
		want []string
	}{
		{one, EncryptionPrepare, []string{name(testKey)}},
		{one, EncryptionDone, []string{name(testKey)}},
		{rotated, EncryptionPrepare, []string{name(testKey), name(other), name(third)}},
		{rotated, EncryptionWrite, []string{name(other), name(testKey), name(third)}},
		{rotated, EncryptionDone, []string{name(other)}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d retired, %s", len(tt.c.RetiredSecretsEncryptionKeys), tt.st), func(t *testing.T) {
			b, err := EncryptionConfig(tt.c, tt.st)
			require.NoError(t, err)
			names, identity := encryptionKeys(t, b)
			assert.Equal(t, tt.want, names)
			assert.True(t, identity, "identity last")
			st, ok := EncryptionStageOf(tt.c, b)
			require.True(t, ok)
			if len(tt.c.RetiredSecretsEncryptionKeys) > 0 {
				assert.Equal(t, tt.st, st)
			} else {
				assert.Equal(t, EncryptionDone, st, "one key: every stage is done")
			}
		})
	}
	assert.NotEqual(t, name(testKey), name(other))
	b, err := EncryptionConfig(one, EncryptionDone)
	require.NoError(t, err)
	_, ok := EncryptionStageOf(rotated, b)
	assert.False(t, ok, "the old key's file is no stage of the rotated keys")
	_, err = EncryptionConfig(&machineconfig.Cluster{SecretsEncryptionKey: testKey, RetiredSecretsEncryptionKeys: []string{"c2hvcnQ="}}, EncryptionWrite)
	assert.ErrorContains(t, err, "not 32 bytes")
}

// TestAdmissionConfig: the cluster config's levels, the latest version of
// each, and the add-ons' namespaces (kube-system's pods, flannel's
// namespace) exempt.
func TestAdmissionConfig(t *testing.T) {
	var cfg struct {
		Kind    string
		Plugins []struct {
			Name          string
			Configuration struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string
				Defaults   map[string]string
				Exemptions struct{ Namespaces []string }
				Limits     []struct {
					Type       string
					QPS, Burst int
				}
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(AdmissionConfig(machineconfig.PodSecurity{Enforce: "restricted", Audit: "baseline", Warn: "privileged"}), &cfg))
	assert.Equal(t, "AdmissionConfiguration", cfg.Kind)
	require.Len(t, cfg.Plugins, 2)
	// EventRateLimit's configuration as its v1alpha1 types and its
	// validation want it: one limit, positive rates.
	erl := cfg.Plugins[1]
	assert.Equal(t, "EventRateLimit", erl.Name)
	assert.Equal(t, "eventratelimit.admission.k8s.io/v1alpha1", erl.Configuration.APIVersion)
	assert.Equal(t, "Configuration", erl.Configuration.Kind)
	require.Len(t, erl.Configuration.Limits, 1)
	assert.Equal(t, "Server", erl.Configuration.Limits[0].Type)
	assert.Equal(t, EventRateLimitQPS, erl.Configuration.Limits[0].QPS)
	assert.Equal(t, EventRateLimitBurst, erl.Configuration.Limits[0].Burst)
	assert.Contains(t, apiServerArgs(true), arg{"enable-admission-plugins", "NodeRestriction,EventRateLimit,DenyServiceExternalIPs"})

	p := cfg.Plugins[0]
	assert.Equal(t, "PodSecurity", p.Name)
	assert.Equal(t, "pod-security.admission.config.k8s.io/v1", p.Configuration.APIVersion)
	assert.Equal(t, map[string]string{
		"enforce": "restricted", "enforce-version": "latest", "audit": "baseline", "audit-version": "latest", "warn": "privileged", "warn-version": "latest",
	}, p.Configuration.Defaults)
	assert.Equal(t, PodSecurityExemptNamespaces(), p.Configuration.Exemptions.Namespaces)

	flannel, err := addons.Flannel(addons.FlannelInput{PodCIDR: "10.244.0.0/16"})
	require.NoError(t, err)
	for _, ns := range regexp.MustCompile(`namespace: (\S+)`).FindAllStringSubmatch(string(flannel)+string(addons.Upgrades), -1) {
		assert.True(t, slices.Contains(PodSecurityExemptNamespaces(), ns[1]), "the add-ons' namespace %s is not exempt", ns[1])
	}
}

// TestAuditPolicy: never a body (no level above Metadata), Secrets,
// ConfigMaps and tokens at Metadata before any rule that could drop them,
// health checks dropped, everything else at Metadata.
func TestAuditPolicy(t *testing.T) {
	var p struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		OmitStages []string `yaml:"omitStages"`
		Rules      []struct {
			Level           string
			Users           []string
			UserGroups      []string `yaml:"userGroups"`
			Verbs           []string
			NonResourceURLs []string `yaml:"nonResourceURLs"`
			Resources       []struct {
				Group     string
				Resources []string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(auditPolicy), &p))
	assert.Equal(t, "audit.k8s.io/v1", p.APIVersion)
	assert.Equal(t, "Policy", p.Kind)
	for i, r := range p.Rules {
		assert.Contains(t, []string{"None", "Metadata"}, r.Level, "rule %d records more than metadata", i)
	}
	first := p.Rules[0]
	assert.Equal(t, "Metadata", first.Level)
	var sensitive []string
	for _, r := range first.Resources {
		for _, res := range r.Resources {
			sensitive = append(sensitive, r.Group+"/"+res)
		}
	}
	assert.ElementsMatch(t, []string{"/secrets", "/configmaps", "/serviceaccounts/token", "authentication.k8s.io/tokenreviews"}, sensitive)
	last := p.Rules[len(p.Rules)-1]
	assert.Equal(t, "Metadata", last.Level)
	assert.Empty(t, last.Resources, "the last rule catches everything")
	assert.Empty(t, last.Users)
	var urls []string
	for _, r := range p.Rules {
		if r.Level == "None" {
			urls = append(urls, r.NonResourceURLs...)
		}
	}
	for _, u := range []string{"/healthz*", "/readyz*", "/livez*"} {
		assert.Contains(t, urls, u)
	}
}
