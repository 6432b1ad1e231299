package support

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// secretFields classifies every string field of the cluster secrets file
// by its YAML path: a field added to the format fails
// TestEverySecretsFieldClassified until it is listed here, so the grep
// below cannot miss a new secret.
var secretFields = map[string]bool{
	"apiVersion": false, "kind": false, "clusterName": false,
	"ca.cert": false, "ca.key": true,
	"frontProxyCA.cert": false, "frontProxyCA.key": true,
	"etcdCA.cert": false, "etcdCA.key": true,
	"serviceAccount.pub": false, "serviceAccount.key": true,
	"bootstrapToken.id": false, "bootstrapToken.secret": true,
	"certificateKey": true, "signingKey": true, "secretsEncryptionKey": true,
	"recoveryKey": true,
}

func TestEverySecretsFieldClassified(t *testing.T) {
	var got []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for f := range typ.Fields() {
			name := prefix + strings.Split(f.Tag.Get("yaml"), ",")[0]
			switch {
			case f.Type.Kind() == reflect.String:
				got = append(got, name)
			case f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == typ.PkgPath():
				walk(name+".", f.Type)
			}
		}
	}
	walk("", reflect.TypeFor[clustersecrets.Secrets]())
	var want []string
	for k := range secretFields {
		want = append(want, k)
	}
	assert.ElementsMatch(t, want, got)
}

// secretValues are the values of the secrets file's secret fields, and
// the token as nodes use it.
func secretValues(t *testing.T, s *clustersecrets.Secrets) []string {
	t.Helper()
	out := []string{s.CA.Key, s.FrontProxyCA.Key, s.EtcdCA.Key, s.ServiceAccount.Key, s.BootstrapToken.Secret, s.CertificateKey, s.SigningKey, s.SecretsEncryptionKey, s.RecoveryKey, s.Token()}
	require.Equal(t, 9, countTrue(secretFields), "secretValues lists every secret field")
	return out
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// needles are the shapes of a secret the archive must not hold: the value,
// each line of a PEM body, and its base64 encoding.
func needles(secrets ...string) []string {
	var out []string
	for _, s := range secrets {
		out = append(out, strings.TrimSpace(s), base64.StdEncoding.EncodeToString([]byte(s)))
		for _, line := range pemBody(s) {
			if len(line) >= MinSecretLen {
				out = append(out, line)
			}
		}
	}
	return out
}

// TestNoSecretInBundle is the support bundle's promise: a control plane
// whose logs and commands spill its secrets in every shape yields an
// archive with no secret of the cluster's secrets file (nor of the keys
// the node made itself, nor of a key it never knew), and markers in their
// place.
func TestNoSecretInBundle(t *testing.T) {
	e := newEnv(t, "cp-1")
	sum, a := e.collect(e.opts())
	s := e.cluster.secrets

	all := needles(append(append(secretValues(t, s), e.nodeKeys...), e.foreignKey, "abcdef.0123456789abcdef")...)
	require.Greater(t, len(all), 40)
	for name, content := range a.files {
		for _, n := range all {
			if strings.Contains(content, n) {
				t.Errorf("%s holds a secret: %.40q...", name, n)
			}
		}
	}

	boot := a.files["journal/boot-0.log"]
	for _, secret := range []string{s.Token(), s.CertificateKey, s.CA.Key} {
		assert.Contains(t, boot, Marker(strings.TrimSpace(secret)))
	}
	assert.Contains(t, boot, "kubeadm join 10.77.0.10:6443 --token [REDACTED sha256:", "text around a secret stays")
	assert.Contains(t, boot, "2026-01-02T03:00:00+0000 cp-1 containerd[812]: msg=\"loaded\" key=\"[REDACTED sha256:")
	assert.Contains(t, a.files["units/terrarium-firstboot/journal.log"], Marker(strings.TrimSpace(s.EtcdCA.Key)))
	assert.Contains(t, a.files["units/terrarium-registry/journal.log"], "tls key [REDACTED sha256:")
	assert.Contains(t, a.files["kubernetes/events.txt"], "Joined with certificate key "+Marker(s.CertificateKey))

	// The machine config: secret fields replaced by their markers, the
	// rest as stored, certificates included.
	var cfg machineconfig.Config
	require.NoError(t, yaml.Unmarshal([]byte(a.files["node/machine.yaml"]), &cfg))
	stored := parseStored(t, e.cluster.configs["cp-1"])
	assert.Equal(t, RedactConfig(stored), &cfg)
	assert.True(t, strings.HasPrefix(cfg.Cluster.PKI.CAKey, strings.TrimSuffix(Marker(strings.TrimSpace(s.CA.Key)), "]")+", "),
		"the key's marker is the one the logs show, described: %s", cfg.Cluster.PKI.CAKey)
	assert.Equal(t, s.CA.Cert, cfg.Cluster.CACert)
	assert.Equal(t, "cp-1", cfg.Hostname)

	assert.Equal(t, "terrarium-support-cp-1-20260102T030405Z", sum.Name)
	assert.Equal(t, sum.Name, a.root)
	assert.GreaterOrEqual(t, sum.Secrets, 8, "config secrets and the node's key files")
	total := 0
	for _, f := range sum.Files {
		total += f.Redactions
		assert.Equal(t, len(a.files[f.Name]), f.Size, f.Name)
	}
	assert.Equal(t, total, sum.Redactions)
	assert.GreaterOrEqual(t, sum.Redactions, 12)
	assert.Contains(t, a.files["index.txt"], "role        init (control plane)")
}

// TestUnreliableCommands: a failing command, a missing one and a hung one
// each leave their error in their member and in the index, and the bundle
// is complete.
func TestUnreliableCommands(t *testing.T) {
	e := newEnv(t, "cp-1")
	e.exec.set("findmnt", response{hang: true})
	opts := e.opts()
	opts.Timeout = 200 * time.Millisecond
	start := time.Now()
	sum, a := e.collect(opts)
	assert.Less(t, time.Since(start), 10*time.Second)

	failed := map[string]string{}
	for _, f := range sum.Failed() {
		failed[f.Name] = f.Err
	}
	assert.Contains(t, failed["journal/boot-1.log"], "journalctl: exit status 1")
	assert.Contains(t, a.files["journal/boot-1.log"], "no persistent journal was found.\n--- error: journalctl: exit status 1\n")
	assert.Contains(t, failed["containers/crictl-ps.txt"], "executable file not found")
	assert.Contains(t, a.files["containers/crictl-pods.txt"], "--- error: crictl: exec: \"crictl\": executable file not found")
	assert.Contains(t, failed["storage/findmnt.txt"], "timed out after 200ms")
	assert.Contains(t, a.files["index.txt"], "timed out after 200ms")
	assert.Len(t, failed, 4, "only these failed: %v", failed)
	assert.Contains(t, a.files, "kernel/dmesg.txt", "members after the failures are there")
}

// TestBusyAPI: a kubectl has twice a member's time, as a busy control
// plane's API needs; a command of the node's own (findmnt) has it once.
func TestBusyAPI(t *testing.T) {
	e := newEnv(t, "cp-1")
	kubectl := "kubectl --kubeconfig " + kubeadmflow.AdminKubeconfig + " --request-timeout 20s "
	e.exec.set(kubectl+"get nodes -o wide", response{delay: 300 * time.Millisecond, out: "NAME STATUS ROLES\ncp-1 Ready control-plane\n"})
	e.exec.set(kubectl+"get pods -A -o wide", response{hang: true})
	e.exec.set("findmnt", response{delay: 300 * time.Millisecond, out: "TARGET SOURCE\n"})
	opts := e.opts()
	opts.Timeout = 200 * time.Millisecond
	sum, a := e.collect(opts)

	assert.Equal(t, "NAME STATUS ROLES\ncp-1 Ready control-plane\n", a.files["kubernetes/nodes.txt"], "answered within twice the time")
	failed := map[string]string{}
	for _, f := range sum.Failed() {
		failed[f.Name] = f.Err
	}
	assert.NotContains(t, failed, "kubernetes/nodes.txt")
	assert.Equal(t, "timed out after 400ms: kubectl: signal: killed", failed["kubernetes/pods.txt"])
	assert.Equal(t, "timed out after 200ms: findmnt: signal: killed", failed["storage/findmnt.txt"])
}

// TestWorker: a worker has no admin kubeconfig, so its bundle says where
// the cluster's state is instead of running kubectl. The only secret of
// its config, the bootstrap token, is redacted.
func TestWorker(t *testing.T) {
	e := newEnv(t, "w-1")
	sum, a := e.collect(e.opts())
	assert.Equal(t, "terrarium-support-w-1-20260102T030405Z", sum.Name)
	for _, m := range []string{"kubernetes/nodes.txt", "kubernetes/pods.txt", "kubernetes/events.txt"} {
		assert.Equal(t, workerNote, a.files[m])
	}
	assert.False(t, e.exec.called("kubectl"), "kubectl ran on a worker")
	assert.Contains(t, a.files["index.txt"], "role        worker\n")
	worker := ConfigSecrets(parseStored(t, e.cluster.configs["w-1"]))
	assert.Equal(t, []string{e.cluster.secrets.Token(), e.cluster.secrets.BootstrapToken.Secret}, worker)
	for name, content := range a.files {
		for _, n := range needles(worker...) {
			assert.NotContains(t, content, n, name)
		}
	}
	assert.Contains(t, a.files["journal/boot-0.log"], "--token "+Marker(e.cluster.secrets.Token()))
}

// TestMembers pins the archive's layout (testdata/members.golden; -update
// rewrites it), and that the same node gives the same bytes.
func TestMembers(t *testing.T) {
	e := newEnv(t, "cp-1")
	var first, second bytes.Buffer
	_, err := Collect(context.Background(), e.h, &first, e.opts())
	require.NoError(t, err)
	_, err = Collect(context.Background(), e.h, &second, e.opts())
	require.NoError(t, err)
	require.Equal(t, first.Bytes(), second.Bytes(), "two bundles of the same node differ")

	a := unpack(t, first.Bytes())
	got := strings.Join(a.entries, "\n") + "\n"
	golden := filepath.Join("testdata", "members.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)
	assert.Equal(t, "index.txt", a.entries[0])
	for _, name := range a.entries[1:] {
		if !strings.HasSuffix(name, "/") {
			assert.Contains(t, a.files["index.txt"], "\n"+name+" ", "index lists %s", name)
		}
	}
}

func TestWriteFile(t *testing.T) {
	e := newEnv(t, "cp-1")
	require.NoError(t, os.MkdirAll(e.h.Path("/run/stick"), 0o755))
	p, sum, err := WriteFile(context.Background(), e.h, "/run/stick", e.opts())
	require.NoError(t, err)
	assert.Equal(t, "/run/stick/terrarium-support-cp-1-20260102T030405Z.tar.gz", p)
	st, err := os.Stat(e.h.Path(p))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	entries, err := os.ReadDir(e.h.Path("/run/stick"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
	data, err := os.ReadFile(e.h.Path(p))
	require.NoError(t, err)
	a := unpack(t, data)
	assert.Equal(t, sum.Name, a.root)
	assert.Len(t, sum.Files, len(a.files))

	_, _, err = WriteFile(context.Background(), e.h, "/run/no-stick", e.opts())
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestCancelled: a cancelled collection writes nothing.
func TestCancelled(t *testing.T) {
	e := newEnv(t, "cp-1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var buf bytes.Buffer
	_, err := Collect(ctx, e.h, &buf, e.opts())
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, buf.Len())
}

// TestUnparsableConfig: a stored config that is not YAML is left out of
// the bundle, and its keys are still redacted by pattern.
func TestUnparsableConfig(t *testing.T) {
	e := newEnv(t, "cp-1")
	s := e.cluster.secrets
	e.write("/state/terrarium/machine.yaml", "{ not yaml\n"+s.CA.Key, 0o600)
	e.write("/etc/hostname", "cp-1\n", 0o644)
	sum, a := e.collect(e.opts())
	assert.Equal(t, "terrarium-support-cp-1-20260102T030405Z", sum.Name, "the hostname falls back")
	assert.Contains(t, a.files["node/machine.yaml"], "--- error: /state/terrarium/machine.yaml is not YAML")
	assert.Contains(t, a.files["index.txt"], "role        unknown (")
	for name, content := range a.files {
		for _, n := range needles(s.CA.Key) {
			assert.NotContains(t, content, n, name)
		}
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, Options{Lines: DefaultLines, MaxBytes: DefaultMaxBytes, Timeout: DefaultTimeout, RegistryURL: "http://127.0.0.1:5000"}, o)
	_, err = Options{Lines: -1}.withDefaults()
	assert.Error(t, err)
}

func TestCaps(t *testing.T) {
	e := newEnv(t, "cp-1")
	e.exec.set("dmesg", response{out: "1\n2\n3\n4\n5\n"})
	e.exec.set("uname -a", response{out: strings.Repeat("x", 30) + "\n" + strings.Repeat("y", 30) + "\n"})
	e.write("/etc/os-release", strings.Repeat("a", 40)+"\n"+strings.Repeat("b", 40)+"\n", 0o644)
	opts := e.opts()
	opts.Lines, opts.MaxBytes = 2, 50
	_, a := e.collect(opts)
	assert.Equal(t, "4\n5\n", a.files["kernel/dmesg.txt"])
	assert.Equal(t, "[... 31 bytes cut ...]\n"+strings.Repeat("y", 30)+"\n", a.files["node/uname.txt"])
	assert.Equal(t, strings.Repeat("a", 40)+"\n[... cut after 41 bytes ...]\n", a.files["node/os-release"])
}

func TestExcluded(t *testing.T) {
	for p, want := range map[string]bool{
		"/etc/kubernetes/pki/ca.crt":                                           true,
		"/etc/kubernetes/pki/etcd/ca.key":                                      true,
		"/etc/kubernetes/admin.conf":                                           true,
		"/etc/kubernetes/../kubernetes/admin.conf":                             true,
		"/etc/terrarium/pki/registry-key.pem":                                  true,
		"/var/lib/x/tls.key":                                                   true,
		"/var/lib/etcd/member/snap/db":                                         true,
		"/var/lib/terrarium/etcd-snapshots/etcd-20261126T100000Z.db":           true,
		"/var/lib/terrarium/backups/terrarium-backup-a-b-20261126T100000Z.age": true,
		"/etc/os-release":                                                      false,
		"/etc/terrarium/registry.json":                                         false,
	} {
		assert.Equal(t, want, excluded(p), p)
	}
	e := newEnv(t, "cp-1")
	c := newCollector(e.h, e.opts(), nodeConfig{}, NewRedactor())
	_, err := c.file("x", "/etc/kubernetes/pki/ca.key").collect(context.Background())
	require.ErrorIs(t, err, ErrExcluded)
	assert.True(t, slices.Contains(kubeconfigs(), "/etc/kubernetes/admin.conf"))
}

func TestHostname(t *testing.T) {
	e := newEnv(t, "cp-1")
	for name, want := range map[string]string{"Node_1.lab\n": "node-1-lab", "": "node", "---": "node"} {
		e.write("/etc/hostname", name, 0o644)
		assert.Equal(t, want, hostname(e.h, nodeConfig{}), "%q", name)
	}
}
