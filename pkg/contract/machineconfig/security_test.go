package machineconfig_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// Bad secrets encryption keys and Pod Security levels, each with the
// message a person at the console gets; the key itself never shows.
func TestBadHardeningSettings(t *testing.T) {
	cfgs := clusterConfigs(t)
	key := func(s string) func(string) string {
		return func(c string) string { return replaceLine(c, "secretsEncryptionKey:", "  secretsEncryptionKey: "+s) }
	}
	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	tests := []struct {
		name, node string
		edit       func(string) string
		want       []string
	}{
		{"key not base64", "cp-1", key("not*base64*at*all"), []string{
			"$.cluster.secretsEncryptionKey: is not standard base64 (want 32 random bytes, 44 characters); regenerate the node configs with imagebuild config cluster, which keeps the key in the cluster's secrets file"}},
		{"key of 16 bytes", "cp-2", key(short), []string{
			"$.cluster.secretsEncryptionKey: decodes to 16 bytes, not 32; regenerate the node configs with imagebuild config cluster"}},
		{"key on a worker", "w-1", func(s string) string {
			return strings.Replace(s, "  role: worker\n", "  role: worker\n  secretsEncryptionKey: "+base64.StdEncoding.EncodeToString(make([]byte, 32))+"\n", 1)
		}, []string{"$.cluster.secretsEncryptionKey: workers run no API server and must not hold the key of the cluster's Secrets; remove secretsEncryptionKey from a worker's config"}},
		{"retired keys", "cp-1", func(s string) string {
			cur := currentKey(s)
			return strings.Replace(s, "  secretsEncryptionKey: "+cur+"\n", "  secretsEncryptionKey: "+cur+"\n  retiredSecretsEncryptionKeys:\n    - "+short+"\n    - "+cur+"\n", 1)
		}, []string{
			"$.cluster.retiredSecretsEncryptionKeys[0]: decodes to 16 bytes, not 32; regenerate the node configs with imagebuild config cluster",
			"$.cluster.retiredSecretsEncryptionKeys[1]: is the current key or an earlier entry again; each key is listed once",
		}},
		{"retired keys without a current key", "cp-1", func(s string) string {
			cur := currentKey(s)
			return strings.Replace(s, "  secretsEncryptionKey: "+cur+"\n", "  retiredSecretsEncryptionKeys: ["+cur+"]\n", 1)
		}, []string{"$.cluster.retiredSecretsEncryptionKeys: retired keys need a current secretsEncryptionKey to rotate to"}},
		{"retired keys on a worker", "w-1", func(s string) string {
			return strings.Replace(s, "  role: worker\n", "  role: worker\n  retiredSecretsEncryptionKeys: ["+base64.StdEncoding.EncodeToString(make([]byte, 32))+"]\n", 1)
		}, []string{"$.cluster.retiredSecretsEncryptionKeys: workers run no API server and must not hold the keys of the cluster's Secrets"}},
		{"unknown levels", "cp-1", func(s string) string {
			return strings.Replace(s, "  role: init\n", "  role: init\n  podSecurity:\n    enforce: strict\n    warn: Restricted\n", 1)
		}, []string{
			`$.cluster.podSecurity.enforce: "strict" is not a Pod Security level; use privileged, baseline, restricted (or leave it out for baseline)`,
			`$.cluster.podSecurity.warn: "Restricted" is not a Pod Security level; use privileged, baseline, restricted (or leave it out for restricted)`,
		}},
		{"levels on a worker", "w-1", func(s string) string {
			return strings.Replace(s, "  role: worker\n", "  role: worker\n  podSecurity:\n    enforce: restricted\n", 1)
		}, []string{"$.cluster.podSecurity: workers run no API server, whose admission sets the levels; remove podSecurity from a worker's config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			edited := tt.edit(cfgs[tt.node])
			require.NotEqual(t, cfgs[tt.node], edited, "the edit changed nothing")
			_, err := machineconfig.Parse("machine.yaml", []byte(edited))
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
			if err != nil {
				assert.NotContains(t, err.Error(), short)
			}
		})
	}
}

// currentKey is the secretsEncryptionKey of config c.
func currentKey(c string) string {
	for _, l := range strings.Split(c, "\n") {
		if k, ok := strings.CutPrefix(l, "  secretsEncryptionKey: "); ok {
			return k
		}
	}
	return ""
}

func TestPodSecurityLevels(t *testing.T) {
	cfgs := clusterConfigs(t)
	c, err := machineconfig.Parse("cp-1.yaml", []byte(cfgs["cp-1"]))
	require.NoError(t, err)
	assert.Nil(t, c.Cluster.PodSecurity, "the default is left out")
	assert.Equal(t, machineconfig.PodSecurity{Enforce: "baseline", Audit: "restricted", Warn: "restricted"}, c.Cluster.PodSecurityLevels())

	c, err = machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(cfgs["cp-1"], "  role: init\n", "  role: init\n  podSecurity:\n    warn: baseline\n", 1)))
	require.NoError(t, err)
	assert.Equal(t, machineconfig.PodSecurity{Enforce: "baseline", Audit: "restricted", Warn: "baseline"}, c.Cluster.PodSecurityLevels(), "a mode left out keeps its default")
}

func TestParsePodSecurity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want machineconfig.PodSecurity
		err  string
	}{
		{in: "enforce=baseline,warn=restricted,audit=restricted", want: machineconfig.PodSecurity{Enforce: "baseline", Audit: "restricted", Warn: "restricted"}},
		{in: "enforce=restricted", want: machineconfig.PodSecurity{Enforce: "restricted"}},
		{in: " enforce=privileged , audit=baseline", want: machineconfig.PodSecurity{Enforce: "privileged", Audit: "baseline"}},
		{in: "enforce=strict", err: `pod security enforce=strict: "strict" is not a Pod Security level; use privileged, baseline, restricted`},
		{in: "deny=baseline", err: `pod security "deny=baseline": write MODE=LEVEL pairs joined by commas, MODE one of enforce, audit, warn`},
		{in: "baseline", err: `pod security "baseline": write MODE=LEVEL pairs`},
		{in: "warn=baseline,warn=restricted", err: "pod security: warn is given twice"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := machineconfig.ParsePodSecurity(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, *got)
		})
	}
}
