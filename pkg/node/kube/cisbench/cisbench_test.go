package cisbench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fakeNode is a node's files and processes under a test directory: a
// control plane as Terrarium forms it, with kubeadm's command lines.
type fakeNode struct {
	t *testing.T
	h *host.Host
	// me are the test's own IDs: "root" to the benchmark, and the etcd
	// account's too (a test cannot chown as anyone but root).
	me ids
}

func (f fakeNode) file(p string, mode os.FileMode, content string) {
	f.t.Helper()
	full := f.h.Path(p)
	require.NoError(f.t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(f.t, os.WriteFile(full, []byte(content), mode))
	require.NoError(f.t, os.Chmod(full, mode))
}

func (f fakeNode) dir(p string, mode os.FileMode) {
	f.t.Helper()
	require.NoError(f.t, os.MkdirAll(f.h.Path(p), mode))
	require.NoError(f.t, os.Chmod(f.h.Path(p), mode))
}

func (f fakeNode) proc(pid int, args ...string) {
	f.file(fmt.Sprintf("/proc/%d/cmdline", pid), 0o444, strings.Join(args, "\x00")+"\x00")
}

func (f fakeNode) remove(p string) {
	require.NoError(f.t, os.RemoveAll(f.h.Path(p)))
}

const (
	apiServerPID = 1001
	cmPID        = 1002
	schedPID     = 1003
	etcdPID      = 1004
	kubeletPID   = 900
	proxyPID     = 1100
)

// kubeletYAML is the kubelet's configuration as Terrarium renders it
// (the settings the benchmark reads).
const kubeletYAML = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
readOnlyPort: 0
seccompDefault: true
protectKernelDefaults: true
serverTLSBootstrap: true
rotateCertificates: true
streamingConnectionIdleTimeout: 5m0s
tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]
podPidsLimit: 4096
makeIPTablesUtilChains: true
eventRecordQPS: 5
`

// newControlPlane lays out a hardened control plane.
func newControlPlane(t *testing.T) fakeNode {
	t.Helper()
	f := fakeNode{t: t, h: &host.Host{Root: t.TempDir()}, me: ids{os.Getuid(), os.Getgid()}}
	f.file("/etc/passwd", 0o644, fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\netcd:x:%d:%d:etcd:/var/lib/etcd:/usr/sbin/nologin\n", f.me.uid, f.me.gid))
	for _, m := range []string{apiServer, controllerManager, scheduler, etcd} {
		f.file(manifestsDir+"/"+m+".yaml", 0o600, "apiVersion: v1\nkind: Pod\n")
	}
	for _, c := range []string{"admin", "super-admin", "scheduler", "controller-manager", "kubelet"} {
		f.file("/etc/kubernetes/"+c+".conf", 0o600, "apiVersion: v1\nkind: Config\n")
	}
	f.file(cniDir+"/10-flannel.conflist", 0o600, "{}\n")
	for _, p := range []string{"ca", "apiserver", "apiserver-kubelet-client", "apiserver-etcd-client", "front-proxy-ca", "front-proxy-client", "etcd/ca", "etcd/server", "etcd/peer", "etcd/healthcheck-client"} {
		f.file(pkiDir+"/"+p+".crt", 0o600, "certificate of "+p+"\n")
		f.file(pkiDir+"/"+p+".key", 0o600, "key of "+p+"\n")
	}
	f.file(pkiDir+"/sa.key", 0o600, "sa key\n")
	f.file(pkiDir+"/sa.pub", 0o600, "sa pub\n")
	f.dir(pkiDir, 0o700)
	f.dir(pkiDir+"/etcd", 0o700)
	f.dir(etcdDataDir+"/member", 0o700)
	f.dir(etcdDataDir, 0o700)
	f.file("/etc/kubernetes/audit-policy.yaml", 0o600, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n")
	f.file("/etc/kubernetes/encryption-config.yaml", 0o600, "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - secretbox:\n          keys: [{name: k1, secret: c2VjcmV0}]\n      - identity: {}\n")
	f.file("/usr/lib/systemd/system/kubelet.service", 0o600, "[Service]\n")
	f.file("/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", 0o600, "[Service]\n")
	f.file(kubeletConfig, 0o600, kubeletYAML)
	f.file(fmt.Sprintf("/proc/%d/root/var/lib/kube-proxy/config.conf", proxyPID), 0o644,
		"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection:\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\nmetricsBindAddress: 127.0.0.1:10249\nmode: nftables\n")
	f.file(fmt.Sprintf("/proc/%d/root/var/lib/kube-proxy/kubeconfig.conf", proxyPID), 0o644,
		"apiVersion: v1\nkind: Config\nusers:\n- name: default\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n")

	ciphers := "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
	f.proc(apiServerPID, "kube-apiserver", "--advertise-address=10.77.0.10", "--allow-privileged=true",
		"--authorization-mode=Node,RBAC", "--client-ca-file=/etc/kubernetes/pki/ca.crt",
		"--admission-control-config-file=/etc/kubernetes/admission-config.yaml",
		"--enable-admission-plugins=NodeRestriction,EventRateLimit,DenyServiceExternalIPs",
		"--audit-policy-file=/etc/kubernetes/audit-policy.yaml", "--audit-log-path=/var/log/kubernetes/audit/audit.log",
		"--audit-log-maxage=30", "--audit-log-maxbackup=10", "--audit-log-maxsize=100",
		"--encryption-provider-config=/etc/kubernetes/encryption-config.yaml",
		"--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt", "--etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt",
		"--etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key", "--etcd-servers=https://127.0.0.1:2379",
		"--kubelet-certificate-authority=/etc/kubernetes/pki/ca.crt",
		"--kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt",
		"--kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key",
		"--profiling=false", "--service-account-extend-token-expiration=false", "--service-account-lookup=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=/etc/kubernetes/pki/sa.pub", "--service-account-signing-key-file=/etc/kubernetes/pki/sa.key",
		"--tls-cert-file=/etc/kubernetes/pki/apiserver.crt", "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key",
		ciphers, "--tls-min-version=VersionTLS12")
	f.proc(cmPID, "kube-controller-manager", "--bind-address=127.0.0.1", "--profiling=false",
		"--root-ca-file=/etc/kubernetes/pki/ca.crt", "--service-account-private-key-file=/etc/kubernetes/pki/sa.key",
		"--terminated-pod-gc-threshold=1000", "--use-service-account-credentials=true")
	f.proc(schedPID, "kube-scheduler", "--bind-address=127.0.0.1", "--kubeconfig=/etc/kubernetes/scheduler.conf", "--profiling=false")
	f.proc(etcdPID, "etcd", "--cert-file=/etc/kubernetes/pki/etcd/server.crt", "--client-cert-auth=true",
		"--data-dir=/var/lib/etcd", "--key-file=/etc/kubernetes/pki/etcd/server.key",
		"--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt", "--peer-client-cert-auth=true",
		"--peer-key-file=/etc/kubernetes/pki/etcd/peer.key", "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt")
	f.proc(kubeletPID, "/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
		"--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--node-ip=10.77.0.10")
	f.proc(proxyPID, "/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=cp-1")
	f.proc(1, "/sbin/init")
	f.proc(1200, "etcdctl", "--cert-file=")
	return f
}

func (f fakeNode) run() Report {
	f.t.Helper()
	r, err := run(context.Background(), f.h, f.me)
	require.NoError(f.t, err)
	return r
}

func failed(r Report) map[string]string {
	out := map[string]string{}
	for _, res := range r.Results {
		if res.Status == Fail {
			out[res.ID] = res.Detail
		}
	}
	return out
}

func TestHardenedControlPlanePasses(t *testing.T) {
	r := newControlPlane(t).run()
	assert.Equal(t, ControlPlane, r.Role)
	assert.Empty(t, failed(r))
	assert.Len(t, r.Results, len(checks()))
	na := map[string]bool{}
	for _, res := range r.Results {
		if res.Status == NotApplicable {
			na[res.ID] = true
		}
	}
	assert.Equal(t, map[string]bool{"1.2.1": true, "1.2.11": true, "1.2.20": true, "4.1.3": true, "4.1.4": true}, na)

	var buf bytes.Buffer
	require.NoError(t, r.Write(&buf))
	golden := filepath.Join("testdata", "controlplane.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), buf.String())
}

func TestWorker(t *testing.T) {
	f := newControlPlane(t)
	for _, m := range []string{apiServer, controllerManager, scheduler, etcd} {
		f.remove(manifestsDir + "/" + m + ".yaml")
	}
	for _, pid := range []int{apiServerPID, cmPID, schedPID, etcdPID} {
		f.remove(fmt.Sprintf("/proc/%d", pid))
	}
	f.remove(pkiDir)
	r := f.run()
	assert.Equal(t, Worker, r.Role)
	assert.Equal(t, map[string]string{"4.1.7": "/etc/kubernetes/pki/ca.crt not found", "4.1.8": "/etc/kubernetes/pki/ca.crt not found"}, failed(r))
	for _, res := range r.Results {
		if strings.HasPrefix(res.ID, "4.") {
			continue
		}
		assert.Equal(t, NotApplicable, res.Status, res.ID)
		assert.Equal(t, "a worker runs no control plane", res.Detail, res.ID)
	}
}

// TestEachCheckCanFail breaks the hardened control plane one way at a
// time; the checks that fail, and what they say, are the ones listed.
func TestEachCheckCanFail(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(f fakeNode)
		fails   map[string]string // check: a fragment of its detail
	}{
		{"manifest 0644", func(f fakeNode) { require.NoError(t, os.Chmod(f.h.Path(manifestsDir+"/kube-apiserver.yaml"), 0o644)) },
			map[string]string{"1.1.1": "/etc/kubernetes/manifests/kube-apiserver.yaml is 0644: chmod 600"}},
		{"manifests missing", func(f fakeNode) { f.remove(manifestsDir + "/etcd.yaml") },
			map[string]string{"1.1.7": "etcd.yaml not found", "1.1.8": "etcd.yaml not found"}},
		{"CNI 0644", func(f fakeNode) { f.file(cniDir+"/10-flannel.conflist", 0o644, "{}") },
			map[string]string{"1.1.9": "10-flannel.conflist is 0644"}},
		{"etcd data 0755", func(f fakeNode) { f.dir(etcdDataDir, 0o755) },
			map[string]string{"1.1.11": "/var/lib/etcd is 0755: chmod 700"}},
		{"etcd's account another", func(f fakeNode) {
			f.file("/etc/passwd", 0o644, fmt.Sprintf("etcd:x:%d:%d::/:/bin/false\n", f.me.uid+1, f.me.gid+1))
		}, map[string]string{"1.1.12": "chown etcd:etcd"}},
		{"no etcd account", func(f fakeNode) { f.file("/etc/passwd", 0o644, "root:x:0:0::/:/bin/sh\n") },
			map[string]string{"1.1.12": "etcd's account: user etcd: no such user"}},
		{"admin.conf 0644", func(f fakeNode) { require.NoError(t, os.Chmod(f.h.Path("/etc/kubernetes/super-admin.conf"), 0o644)) },
			map[string]string{"1.1.13": "super-admin.conf is 0644"}},
		{"a key 0640", func(f fakeNode) { require.NoError(t, os.Chmod(f.h.Path(pkiDir+"/etcd/peer.key"), 0o640)) },
			map[string]string{"1.1.21": "/etc/kubernetes/pki/etcd/peer.key is 0640"}},
		{"a certificate 0664", func(f fakeNode) { require.NoError(t, os.Chmod(f.h.Path(pkiDir+"/ca.crt"), 0o664)) },
			map[string]string{"1.1.20": "ca.crt is 0664: chmod 644", "4.1.7": "ca.crt is 0664: chmod 644"}},
		{"profiling on", func(f fakeNode) { appendArgs(f, apiServerPID, "--profiling=true") },
			map[string]string{"1.2.15": "--profiling=true: set --profiling=false"}},
		{"anonymous with AlwaysAllow", func(f fakeNode) { appendArgs(f, apiServerPID, "--authorization-mode=AlwaysAllow") },
			map[string]string{"1.2.1": "set --anonymous-auth=false", "1.2.6": "take AlwaysAllow out", "1.2.7": "add Node", "1.2.8": "add RBAC"}},
		{"token file", func(f fakeNode) { appendArgs(f, apiServerPID, "--token-auth-file", "/etc/tokens.csv") },
			map[string]string{"1.2.2": "--token-auth-file=/etc/tokens.csv: remove it"}},
		{"admission plugins", func(f fakeNode) {
			appendArgs(f, apiServerPID, "--enable-admission-plugins=AlwaysAdmit", "--disable-admission-plugins=ServiceAccount,NamespaceLifecycle")
		}, map[string]string{"1.2.3": "add DenyServiceExternalIPs", "1.2.9": "add EventRateLimit", "1.2.10": "take AlwaysAdmit out",
			"1.2.12": "take ServiceAccount out", "1.2.13": "take NamespaceLifecycle out", "1.2.14": "add NodeRestriction"}},
		{"short audit log", func(f fakeNode) { appendArgs(f, apiServerPID, "--audit-log-maxage=7", "--audit-log-maxsize=x") },
			map[string]string{"1.2.17": "--audit-log-maxage=7: set it to 30 or more", "1.2.19": "--audit-log-maxsize=x"}},
		{"weak ciphers", func(f fakeNode) {
			appendArgs(f, apiServerPID, "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
		}, map[string]string{"1.2.29": "has TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"}},
		{"secrets in plain text", func(f fakeNode) {
			f.file("/etc/kubernetes/encryption-config.yaml", 0o600, "kind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - identity: {}\n      - aescbc: {}\n")
		}, map[string]string{"1.2.28": "secrets written with identity"}},
		{"no encryption, no audit policy", func(f fakeNode) {
			appendArgs(f, apiServerPID, "--encryption-provider-config=", "--audit-policy-file=")
		}, map[string]string{"1.2.27": "--encryption-provider-config unset", "1.2.28": "--encryption-provider-config unset: Secrets are stored in plain text",
			"3.2.1": "--audit-policy-file unset: no API call is audited"}},
		{"extending tokens", func(f fakeNode) { appendArgs(f, apiServerPID, "--service-account-extend-token-expiration") },
			map[string]string{"1.2.30": "--service-account-extend-token-expiration=true"}},
		{"controller manager everywhere", func(f fakeNode) {
			f.proc(cmPID, "kube-controller-manager", "--feature-gates=RotateKubeletServerCertificate=false")
		}, map[string]string{"1.3.1": "--terminated-pod-gc-threshold unset", "1.3.2": "--profiling unset", "1.3.3": "use-service-account-credentials",
			"1.3.4": "service-account-private-key-file", "1.3.5": "--root-ca-file unset", "1.3.6": "remove RotateKubeletServerCertificate=false",
			"1.3.7": `--bind-address unset (default "0.0.0.0")`}},
		{"no scheduler", func(f fakeNode) { f.remove(fmt.Sprintf("/proc/%d", schedPID)) },
			map[string]string{"1.4.1": "kube-scheduler is not running", "1.4.2": "kube-scheduler is not running"}},
		{"etcd without TLS", func(f fakeNode) {
			f.proc(etcdPID, "/usr/local/bin/etcd", "--auto-tls", "--peer-auto-tls=true", "--trusted-ca-file=/etc/kubernetes/pki/ca.crt")
		}, map[string]string{"2.1": "--cert-file and --key-file unset", "2.2": "--client-cert-auth", "2.3": "--auto-tls=true",
			"2.4": "--peer-cert-file and --peer-key-file unset", "2.5": "--peer-client-cert-auth", "2.6": "--peer-auto-tls=true",
			"2.7": "is the cluster CA"}},
		{"no audit policy", func(f fakeNode) { f.file("/etc/kubernetes/audit-policy.yaml", 0o600, "kind: Policy\nrules: []\n") },
			map[string]string{"3.2.1": "no audit rules"}},
		{"kubelet unit 0644", func(f fakeNode) { f.file("/etc/systemd/system/kubelet.service.d/20-local.conf", 0o644, "") },
			map[string]string{"4.1.1": "20-local.conf is 0644"}},
		{"proxy kubeconfig with a key", func(f fakeNode) {
			f.file(fmt.Sprintf("/proc/%d/root/var/lib/kube-proxy/kubeconfig.conf", proxyPID), 0o644, "users:\n- user:\n    client-key-data: AAAA\n")
		}, map[string]string{"4.1.3": "holds a credential (client-key-data)", "4.1.4": "holds a credential"}},
		{"kubelet.conf and config 0644", func(f fakeNode) {
			require.NoError(t, os.Chmod(f.h.Path(kubeletKubconfig), 0o644))
			require.NoError(t, os.Chmod(f.h.Path(kubeletConfig), 0o644))
		}, map[string]string{"4.1.5": "kubelet.conf is 0644", "4.1.9": "config.yaml is 0644"}},
		{"kubelet defaults", func(f fakeNode) { f.file(kubeletConfig, 0o600, "kind: KubeletConfiguration\n") },
			map[string]string{"4.1.7": "authentication.x509.clientCAFile unset (default) names no file", "4.1.8": "names no file",
				"4.2.3": "set it to the cluster CA's certificate", "4.2.9": "no serving certificate", "4.2.10": "rotateCertificates unset (default): false",
				"4.2.11": "set serverTLSBootstrap: true", "4.2.12": "Go's defaults include CBC suites", "4.2.13": "podPidsLimit unset (default): -1",
				"4.2.14": "seccompDefault unset (default): false: set seccompDefault: true"}},
		{"kubelet flags over its file", func(f fakeNode) {
			appendArgs(f, kubeletPID, "--anonymous-auth=true", "--authorization-mode=AlwaysAllow", "--read-only-port=10255",
				"--streaming-connection-idle-timeout=0", "--make-iptables-util-chains=false", "--hostname-override=x", "--event-qps=0")
		}, map[string]string{"4.2.1": "flag --anonymous-auth: true", "4.2.2": "flag --authorization-mode: AlwaysAllow", "4.2.4": "flag --read-only-port: 10255",
			"4.2.5": "set a timeout", "4.2.6": "flag --make-iptables-util-chains: false", "4.2.7": "--hostname-override=x", "4.2.8": "0 (unlimited)"}},
		{"proxy metrics everywhere", func(f fakeNode) { appendArgs(f, proxyPID, "--metrics-bind-address=0.0.0.0:10249") },
			map[string]string{"4.3.1": "--metrics-bind-address: 0.0.0.0:10249: set 127.0.0.1:10249"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newControlPlane(t)
			tc.breakIt(f)
			got := failed(f.run())
			assert.Len(t, got, len(tc.fails), "failed: %v", got)
			for id, fragment := range tc.fails {
				assert.Contains(t, got[id], fragment, id)
			}
		})
	}
}

// TestRootsFilesChecked: every file is the test's own; when the
// benchmark wants another owner for root's files, every ownership check
// of root's files fails and no other (etcd's account is still the
// test's).
func TestRootsFilesChecked(t *testing.T) {
	f := newControlPlane(t)
	f.me = ids{f.me.uid + 1, f.me.gid + 1}
	got := failed(f.run())
	want := []string{"1.1.2", "1.1.4", "1.1.6", "1.1.8", "1.1.10", "1.1.14", "1.1.16", "1.1.18", "1.1.19", "4.1.2", "4.1.6", "4.1.8", "4.1.10"}
	assert.Len(t, got, len(want), "failed: %v", got)
	for _, id := range want {
		assert.Contains(t, got[id], "chown root:root", id)
	}
}

// appendArgs adds flags to a fake process's command line (the last of a
// repeated flag wins).
func appendArgs(f fakeNode, pid int, args ...string) {
	p := f.h.Path(fmt.Sprintf("/proc/%d/cmdline", pid))
	b, err := os.ReadFile(p)
	require.NoError(f.t, err)
	require.NoError(f.t, os.WriteFile(p, append(b, []byte(strings.Join(args, "\x00")+"\x00")...), 0o444))
}

func TestParseFlags(t *testing.T) {
	got := parseFlags([]string{"--a=1", "--b", "2", "--c", "--d=x=y", "-e", "word", "--", "-", "--a=3", "--f"})
	assert.Equal(t, map[string]string{"a": "3", "b": "2", "c": "true", "d": "x=y", "e": "word", "f": "true"}, got)
}

func TestReportJSON(t *testing.T) {
	r := newControlPlane(t).run()
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, r, back)
	assert.Contains(t, r.Summary(), Benchmark+", control-plane: ")
	assert.Regexp(t, regexp.MustCompile(`: \d+ pass, 0 fail, 5 not applicable$`), r.Summary())
}

// TestDocsListEveryCheck keeps docs/security.md's table true: one row
// per check, by number, with the status a hardened node gets.
func TestDocsListEveryCheck(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "security.md"))
	require.NoError(t, err)
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([0-9.]+) \| [^|]+ \| (pass|n/a)`).FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = m[2]
	}
	r := newControlPlane(t).run()
	for _, res := range r.Results {
		if assert.Contains(t, rows, res.ID, "docs/security.md has no row for %s", res.ID) {
			assert.Equal(t, string(res.Status), rows[res.ID], "docs/security.md's status of %s", res.ID)
		}
	}
	assert.Len(t, rows, len(r.Results), "docs/security.md lists checks that are not in the benchmark")
}
