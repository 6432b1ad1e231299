package support

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clusterconfig"
	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/apilb"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
)

// testNow is the fake node's clock.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// cluster is a real cluster's secrets file and the configs `imagebuild
// config cluster` renders from it, made once: key generation is slow
// under the race detector.
type cluster struct {
	secretsFile string
	secrets     *clustersecrets.Secrets
	configs     map[string][]byte // by hostname: cp-1 (init), w-1 (worker)
}

var testCluster = sync.OnceValues(func() (*cluster, error) {
	dir, err := os.MkdirTemp("", "support-test-")
	if err != nil {
		return nil, err
	}
	s, err := clustersecrets.Generate("lab", testNow.Add(-time.Hour), 24*time.Hour, nil)
	if err != nil {
		return nil, err
	}
	if _, err := s.EnsureSigningKey(nil); err != nil {
		return nil, err
	}
	c := &cluster{secretsFile: filepath.Join(dir, "secrets.yaml"), configs: map[string][]byte{}}
	if err := clustersecrets.Save(c.secretsFile, s); err != nil {
		return nil, err
	}
	// What the test greps for is what the file holds.
	if c.secrets, err = clustersecrets.Load(c.secretsFile); err != nil {
		return nil, err
	}
	cfgs, err := clusterconfig.Configs(&clusterconfig.Topology{
		ControlPlanes: []clusterconfig.Node{{Hostname: "cp-1", IP: netip.MustParseAddr("10.77.0.10")}},
		Workers:       []clusterconfig.Node{{Hostname: "w-1", IP: netip.MustParseAddr("10.77.0.20")}},
		PrefixLength:  24, Interface: "en*",
	}, c.secrets)
	if err != nil {
		return nil, err
	}
	for _, cfg := range cfgs {
		if c.configs[cfg.Hostname], err = cfg.Marshal(); err != nil {
			return nil, err
		}
	}
	return c, nil
})

// response is what the fake executor answers to one command line.
type response struct {
	out  string
	err  error
	hang bool // block until the context ends, as a hung command does
	// delay: answer after this long, or fail as a hung command when the
	// context ends first.
	delay time.Duration
}

// fakeExec answers per command line; a command it does not know is not
// installed.
type fakeExec struct {
	mu    sync.Mutex
	resp  map[string]response
	calls []string
}

var _ host.Executor = (*fakeExec)(nil)

func (f *fakeExec) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	f.mu.Lock()
	f.calls = append(f.calls, line)
	r, ok := f.resp[line]
	f.mu.Unlock()
	if ok && r.delay > 0 {
		select {
		case <-ctx.Done():
			return nil, errors.New("signal: killed")
		case <-time.After(r.delay):
		}
	}
	switch {
	case !ok:
		return nil, &exec.Error{Name: name, Err: exec.ErrNotFound}
	case r.hang:
		<-ctx.Done()
		return nil, errors.New("signal: killed")
	}
	return []byte(r.out), r.err
}

func (f *fakeExec) set(line string, r response) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resp[line] = r
}

func (f *fakeExec) called(prefix string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

// env is a fake node: a root directory, the executor, a registry.
type env struct {
	t       *testing.T
	h       *host.Host
	exec    *fakeExec
	cluster *cluster
	// nodeKeys are private keys made on the node itself (not in the
	// config): the API server's, the registry's, the admin client's.
	nodeKeys []string
	// foreignKey is a private key the node does not know of.
	foreignKey string
	registry   *httptest.Server
}

// journalCmd is the journalctl command line with the default cap.
const journalCmd = "journalctl --no-pager -o short-iso -n 20000 "

// newEnv makes the fake node hostname of the test cluster: its stored
// config, state, key files and commands whose output leaks secrets in
// every shape the redactor must catch.
func newEnv(t *testing.T, node string) *env {
	t.Helper()
	c, err := testCluster()
	require.NoError(t, err)
	e := &env{t: t, exec: &fakeExec{resp: map[string]response{}}, cluster: c}
	e.h = &host.Host{Root: t.TempDir(), Executor: e.exec, Clock: host.ClockFunc(func() time.Time { return testNow })}
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/_catalog" {
			_, _ = io.WriteString(w, `{"repositories":["library/hello","pause"]}`)
			return
		}
		_, _ = io.WriteString(w, "{}")
	})
	e.registry = httptest.NewServer(mux)
	t.Cleanup(e.registry.Close)

	cfg := c.configs[node]
	e.write(nodestate.ConfigFile.String(), string(cfg), 0o600)
	e.write("/etc/os-release", "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\n", 0o644)
	e.write(layout.ReleaseFile, `{"name":"terrarium","version":"0.1.0"}`+"\n", 0o644)
	e.write("/proc/cmdline", "console=ttyS0,115200n8 terrarium.slot=a quiet\n", 0o444)
	e.write(statusFile, `{"name":"terrarium","version":"0.1.0","slot":"a","boot":2,"state":"verified"}`+"\n", 0o644)
	e.write(apilb.ConfigFile, `{"listen":"127.0.0.1:7445","backends":["10.77.0.10:6443"]}`+"\n", 0o644)
	journal, err := nodestate.On(e.h).OpenJournal()
	require.NoError(t, err)
	require.NoError(t, journal.Update(func(j *nodestate.Journal) {
		j.Kubeadm = &nodestate.KubeadmProgress{Node: node, Done: []string{"node preflight", "init phase certs all"}}
		j.Current("boot-1", "a")
	}))

	registryKey, apiserverKey, clientKey := newKey(t, "EC PRIVATE KEY"), newKey(t, "EC PRIVATE KEY"), newKey(t, "EC PRIVATE KEY")
	e.nodeKeys = []string{registryKey, apiserverKey, clientKey}
	e.foreignKey = newKey(t, "PRIVATE KEY")
	e.write(layout.RegistryConfigFile, `{"serve":true,"keyFile":"/etc/terrarium/pki/registry-key.pem"}`+"\n", 0o644)
	e.write(layout.RegistrySideloadLog, `{"at":"2026-01-01T00:00:00Z","disk":"/dev/sdb","added":1}`+"\n", 0o644)
	e.write("/etc/terrarium/pki/registry-key.pem", registryKey, 0o600)
	e.exec.set("uname -a", response{out: "Linux " + node + " 6.12.0-amd64 #1 SMP x86_64 GNU/Linux\n"})
	e.exec.set("systemctl --failed --no-pager", response{out: "0 loaded units listed.\n"})
	for _, u := range units() {
		e.exec.set("systemctl status --no-pager --full "+u, response{out: "● " + u + "\n     Active: active (running)\n"})
		e.exec.set(journalCmd+"-u "+u, response{out: logLines(node, u, "started")})
	}
	e.exec.set("ctr --namespace k8s.io containers ls", response{out: "CONTAINER IMAGE RUNTIME\n4f2c registry.k8s.io/etcd:3.6.8-0 io.containerd.runc.v2\n"})
	e.exec.set("ctr --namespace k8s.io tasks ls", response{out: "TASK PID STATUS\n4f2c 912 RUNNING\n"})
	e.exec.set("ip -d addr", response{out: "2: enp0s2: <BROADCAST,MULTICAST,UP> mtu 1500\n    inet 10.77.0.10/24 scope global enp0s2\n"})
	e.exec.set("ip route", response{out: "10.77.0.0/24 dev enp0s2 proto kernel scope link src 10.77.0.10\n"})
	e.exec.set("ip -6 route", response{out: ""})
	e.exec.set("df -h", response{out: "Filesystem Size Used Avail Use% Mounted on\n/dev/vda4 9.5G 2.1G 7.0G 23% /state\n"})
	e.exec.set("findmnt", response{out: "TARGET SOURCE FSTYPE\n/ /dev/vda2 erofs\n"})
	e.exec.set("dmesg", response{out: "[    0.000000] Linux version 6.12.0\n[    1.000000] EXT4-fs (vda4): mounted\n"})
	// The previous boot's journal is not there: journalctl fails.
	e.exec.set(journalCmd+"-b -1", response{out: "Specifying boot ID or boot offset has no effect, no persistent journal was found.\n", err: errors.New("exit status 1")})

	s := c.secrets
	e.exec.set(journalCmd+"-b 0", response{out: logLines(node, "terrarium-firstboot",
		"kubeadm join 10.77.0.10:6443 --token "+s.Token()+" --discovery-token-ca-cert-hash sha256:0000 --control-plane --certificate-key "+s.CertificateKey) +
		// The CA key dumped into the journal line by line.
		logLines(node, "kubeadm", s.CA.Key) +
		// A key unknown to the node, JSON-escaped inside a log line.
		logLines(node, "containerd", `msg="loaded" key="`+strings.ReplaceAll(e.foreignKey, "\n", `\n`)+`"`) +
		// One line of the service account's key, alone.
		logLines(node, "kubelet", "partial: "+pemLine(t, s.ServiceAccount.Key, 3)) +
		// A node key's line and a kubeconfig's embedded client key.
		logLines(node, "kube-apiserver", "key "+pemLine(t, apiserverKey, 1)) +
		logLines(node, "kubectl", "client-key-data: "+base64.StdEncoding.EncodeToString([]byte(clientKey))) +
		// A token that is not the cluster's, shaped like one.
		logLines(node, "kubeadm", "created token abcdef.0123456789abcdef"),
	})
	e.exec.set(journalCmd+"-u terrarium-firstboot.service", response{out: logLines(node, "kubeadm",
		"[certs] using CA key line "+pemLine(t, s.CA.Key, 2)) +
		logLines(node, "kubeadm", "etcd CA:\n"+s.EtcdCA.Key) +
		logLines(node, "kubeadm", "front proxy CA (base64): "+base64.StdEncoding.EncodeToString([]byte(s.FrontProxyCA.Key))) +
		// The whole config base64-encoded at an odd alignment, as in a
		// dump of some larger encoded document.
		logLines(node, "firstboot", "config blob "+base64.StdEncoding.EncodeToString(append([]byte("x"), cfg...)))})
	e.exec.set(journalCmd+"-u terrarium-registry.service", response{out: logLines(node, "terrarium-registry", "tls key "+pemLine(t, registryKey, 2))})

	if node == "cp-1" {
		e.write(kubeadmflow.AdminKubeconfig, "users:\n- name: kubernetes-admin\n  user:\n    client-key-data: "+base64.StdEncoding.EncodeToString([]byte(clientKey))+"\n", 0o600)
		e.write("/etc/kubernetes/pki/apiserver.key", apiserverKey, 0o600)
		for rel, data := range s.Files() {
			e.write("/etc/kubernetes/pki/"+rel, string(data), 0o600)
		}
		kubectl := "kubectl --kubeconfig " + kubeadmflow.AdminKubeconfig + " --request-timeout 20s "
		e.exec.set(kubectl+"get nodes -o wide", response{out: "NAME STATUS ROLES\ncp-1 Ready control-plane\nw-1 Ready <none>\n"})
		e.exec.set(kubectl+"get pods -A -o wide", response{out: "NAMESPACE NAME READY STATUS\nkube-system etcd-cp-1 1/1 Running\n"})
		e.exec.set(kubectl+"get events -A --sort-by=.lastTimestamp", response{out: "kube-system 1m Normal Joined with certificate key " + s.CertificateKey + "\n"})
	}
	return e
}

func (e *env) write(p, data string, mode os.FileMode) {
	e.t.Helper()
	full := e.h.Path(p)
	require.NoError(e.t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(e.t, os.WriteFile(full, []byte(data), mode))
}

func (e *env) opts() Options { return Options{RegistryURL: e.registry.URL} }

// collect runs Collect and unpacks what it wrote.
func (e *env) collect(opts Options) (Summary, *archive) {
	e.t.Helper()
	var buf bytes.Buffer
	sum, err := Collect(context.Background(), e.h, &buf, opts)
	require.NoError(e.t, err)
	return sum, unpack(e.t, buf.Bytes())
}

// archive is an unpacked bundle: its root, the entries in order and the
// regular files' contents, named relative to the root.
type archive struct {
	root    string
	entries []string
	files   map[string]string
}

// unpack checks that data is a gzip-compressed tar whose entries all lie
// under one root directory, owned by root with the bundle's time, and
// returns them.
func unpack(t *testing.T, data []byte) *archive {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err, "not gzip")
	tr := tar.NewReader(zr)
	a := &archive{files: map[string]string{}}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "not a tar archive")
		if a.root == "" {
			require.Equal(t, byte(tar.TypeDir), hdr.Typeflag, "first entry %s is not the root directory", hdr.Name)
			a.root = strings.TrimSuffix(hdr.Name, "/")
			continue
		}
		rel, ok := strings.CutPrefix(hdr.Name, a.root+"/")
		require.True(t, ok, "%s is outside the root %s", hdr.Name, a.root)
		require.Equal(t, rel, path.Clean(rel)+map[bool]string{true: "/"}[hdr.Typeflag == tar.TypeDir], "unclean name %s", hdr.Name)
		require.True(t, hdr.ModTime.Equal(testNow), "%s: time %s", hdr.Name, hdr.ModTime)
		require.Equal(t, []any{0, 0, "root", "root"}, []any{hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname}, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			require.EqualValues(t, 0o755, hdr.Mode, hdr.Name)
			a.entries = append(a.entries, rel)
		case tar.TypeReg:
			require.EqualValues(t, 0o644, hdr.Mode, hdr.Name)
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			a.entries = append(a.entries, rel)
			a.files[rel] = string(b)
		default:
			t.Fatalf("%s: entry type %c", hdr.Name, hdr.Typeflag)
		}
	}
	require.NoError(t, zr.Close())
	return a
}

// logLines prints text as a journal in short-iso format would, each line
// with its own prefix.
func logLines(node, unit, text string) string {
	var b strings.Builder
	for line := range strings.Lines(strings.TrimRight(text, "\n")) {
		b.WriteString("2026-01-02T03:00:00+0000 " + node + " " + unit + "[812]: " + line)
		if !strings.HasSuffix(line, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// pemLine is the n-th body line (from 1) of a PEM block.
func pemLine(t *testing.T, key string, n int) string {
	t.Helper()
	lines := pemBody(key)
	require.Greater(t, len(lines), n-1, "key has %d body lines", len(lines))
	return lines[n-1]
}

// pemBody lists the body lines of the PEM blocks in s.
func pemBody(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	return out
}

// newKey makes a fresh P-256 key, as a PEM block of type typ (SEC1 or
// PKCS#8).
func newKey(t *testing.T, typ string) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	var der []byte
	if typ == "PRIVATE KEY" {
		der, err = x509.MarshalPKCS8PrivateKey(k)
	} else {
		der, err = x509.MarshalECPrivateKey(k)
	}
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// parseStored parses a config the way the node stored it.
func parseStored(t *testing.T, data []byte) *machineconfig.Config {
	t.Helper()
	c, err := machineconfig.Parse("machine.yaml", data)
	require.NoError(t, err)
	return c
}
