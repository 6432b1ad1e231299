package firstboot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/localvolumes"
	"github.com/terrarium-os/terrarium/pkg/node/kube/volumebackup"
	"github.com/terrarium-os/terrarium/pkg/node/ops/timesync"
	"github.com/terrarium-os/terrarium/pkg/node/status"

	"github.com/terrarium-os/terrarium/pkg/node/boot/bootloader"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/images/cri"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// Keys from pkg/machineconfig's tests (their private keys were discarded).
const (
	testKey1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop"
	testKey2 = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBJNYzx3TjxpZe/H+GNiqnc6BIvsbVSoNkgdQ9fqENZuOyLHB0b0p5ttIFasJfF5//9q0tAlXkv/uFngvnYoKwU="
)

// fullConfig has a static interface (gateway, DNS), a DHCP interface
// matched by MAC address, and an admin user with two keys.
const fullConfig = `apiVersion: terrarium.dev/v1alpha1
kind: MachineConfig
hostname: node-1
network:
  interfaces:
    - name: enp0s2
      addresses: [10.0.0.10/24, fd00::10/64]
      gateway: 10.0.0.1
      dns: [10.0.0.1, 10.0.0.2]
    - macAddress: "52:54:00:12:34:56"
      dhcp: true
admin:
  name: ops
  sshAuthorizedKeys:
    - ` + testKey1 + `
    - ` + testKey2 + `
`

// minimalConfig has no network and no admin user.
const minimalConfig = `apiVersion: terrarium.dev/v1alpha1
kind: MachineConfig
hostname: lonely
`

const configFrom = "/dev/disk/by-label/TERRA-CONFIG"

// chronyTracking is chrony following the init node (`chronyc -c tracking`).
const chronyTracking = "0A4D000A,10.77.0.10,9,1764144000.123456789,-0.000012000,0.000003000,0.000010000,-1.500,0.001,0.100,0.000500000,0.000100000,16.2,Normal\n"

// env is a fake machine: a root directory, a recording Exec, a boot loader
// and a reboot function.
type env struct {
	t       *testing.T
	root    string
	console syncBuffer
	loader  *fakeLoader

	mu       sync.Mutex
	cmds     [][]string
	failCmd  map[string]error // command name -> error Exec returns
	reboots  int
	clockNow time.Time
	// hostExec replaces exec as the host's Exec when set.
	hostExec func(ctx context.Context, name string, args ...string) ([]byte, error)
	attempts int
	// media are the sticks inserted into the running node.
	media fakeMedia
	// leases are the API's Leases (the join lock).
	leases fakeLeases
	// configMaps are the ConfigMaps applied to the fake API (the
	// add-ons' record).
	configMaps fakeConfigMaps
	// nodes are the API's nodes, all Ready; nil means cp-1 and w-1.
	nodes []string
	// deletedNodes are the Nodes the admin deleted, in order (under mu).
	deletedNodes []string
	// csrSigners are the kubelet CSR signers started, as "kubeconfig
	// pkiDir" (under mu).
	csrSigners []string
	// apiVersions are the Kubernetes versions of the API servers by
	// endpoint (host:port), "" for one that does not answer; an endpoint
	// not listed runs v1.36.3.
	apiVersions map[string]string
	// runtime answers the host's CRI checks (recorded as the command
	// "cri-check ENDPOINT"); nil means a ready containerd.
	runtime func(ctx context.Context, endpoint string) (cri.Info, error)
	// pull answers the host's image pulls (recorded as the command
	// "cri-pull REF"); nil means every image pulls at once.
	pull func(ctx context.Context, ref string) (bool, error)
	// running answers whether a container of the kubelet's runs (recorded
	// as the command "cri-running NAME"); nil means every one does.
	// newEnv also writes flanneld's lease: the pod network is up.
	running func(name string) bool
}

func (e *env) retryAttempts(n int) { e.attempts = n }

// probeBody is the fake API's answer to a GET of url: for cluster-info, a
// ConfigMap signed for the token of the node's stored config (the one
// it joins with); otherwise "ok".
func (e *env) probeBody(url string) []byte {
	if !strings.HasSuffix(url, "/configmaps/cluster-info") {
		return []byte("ok")
	}
	b, err := os.ReadFile(e.path(filepath.Join(layout.StateMount, layout.StateNodeConfig)))
	if err != nil {
		return []byte("{}")
	}
	cfg, err := machineconfig.Parse("stored", b)
	if err != nil || cfg.Cluster == nil {
		return []byte("{}")
	}
	id, _, _ := strings.Cut(cfg.Cluster.Token, ".")
	return []byte(`{"data":{"kubeconfig":"...","jws-kubeconfig-` + id + `":"eyJhbGciOiJIUzI1NiJ9..sig"}}`)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		t:        t,
		root:     t.TempDir(),
		loader:   &fakeLoader{result: bootloader.BlessedNow},
		failCmd:  map[string]error{},
		clockNow: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
	}
	e.setRelease(nil)
	e.write("/proc/cmdline", "BOOT_IMAGE=/terrarium/a/vmlinuz root=PARTLABEL=TERRA-A ro terrarium.slot=a quiet\n")
	e.setBootID("11111111-1111-1111-1111-111111111111")
	e.write("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\netcd:x:232:232:etcd:/var/lib/etcd:/usr/sbin/nologin\n")
	e.write("/usr/sbin/chronyd", "") // the image carries chrony
	e.write(layout.StateMount+"/"+layout.StateMarkerFile, "created=2025-06-01T11:59:00Z slot=a\n")
	e.write(kubeadmflow.FlannelSubnetEnv, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n")
	e.write("/proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
	e.write("/sys/devices/system/cpu/online", "0-1\n")
	e.write("/proc/meminfo", "MemTotal:        3006704 kB\nMemFree:          120000 kB\n")
	e.mkdir("/run")
	// A kernel's switch as it boots; br_netfilter's appear with the
	// module (exec).
	e.write("/proc/sys/net/ipv4/ip_forward", "0\n")
	return e
}

func (e *env) path(p string) string { return filepath.Join(e.root, p) }

// state is the node's TERRA-STATE, as firstboot's files on it are read
// and written.
func (e *env) state() nodestate.Files { return nodestate.At(e.path(layout.StateMount)) }

// journalPath is where the journal is, as the node sees it.
func journalPath() string { return nodestate.JournalFile.String() }

func (e *env) write(p, content string) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(e.path(p)), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(e.path(p), []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// writeQuiet writes p without failing the test: for the fake executor,
// which runs on firstboot's goroutines, where t.Fatal may not be called.
func (e *env) writeQuiet(p, content string) {
	if err := os.MkdirAll(filepath.Dir(e.path(p)), 0o755); err == nil {
		_ = os.WriteFile(e.path(p), []byte(content), 0o644)
	}
}

func (e *env) mkdir(p string) {
	e.t.Helper()
	if err := os.MkdirAll(e.path(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) read(p string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.path(p))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func (e *env) exists(p string) bool {
	_, err := os.Lstat(e.path(p))
	return err == nil
}

func (e *env) setRelease(faults []string) { e.writeRelease("1.2.3", faults) }

// setReleaseVersion makes the running slot another version.
func (e *env) setReleaseVersion(v string) { e.writeRelease(v, nil) }

func (e *env) writeRelease(version string, faults []string) {
	e.t.Helper()
	b, err := json.Marshal(map[string]any{
		"name": "terrarium", "version": version, "suite": "trixie",
		"kernelVersion": "6.12.0", "builtAt": "2025-01-01T00:00:00Z", "faults": faults,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.write(layout.ReleaseFile, string(b)+"\n")
}

func (e *env) setBootID(id string) { e.write("/proc/sys/kernel/random/boot_id", id+"\n") }

// exec records every command. useradd appends the user to etc/passwd (with
// this process's ids, so that chown works without privileges) and creates
// the home directory.
func (e *env) exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cmds = append(e.cmds, append([]string{name}, args...))
	if err := e.failCmd[name]; err != nil {
		return []byte("fake failure output\n"), err
	}
	if name == "date" && len(args) == 3 && args[1] == "--set" {
		// date --utc --set @SECONDS steps the clock.
		sec, err := strconv.ParseInt(strings.TrimPrefix(args[2], "@"), 10, 64)
		if err != nil {
			return nil, err
		}
		e.clockNow = time.Unix(sec, 0).UTC()
	}
	if name == "modprobe" && len(args) == 1 {
		// The module is loaded: it shows in /sys/module, and
		// br_netfilter brings its switches under /proc/sys, off.
		e.writeQuiet("/sys/module/"+args[0]+"/refcnt", "0\n")
		if args[0] == "br_netfilter" {
			for _, f := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables"} {
				e.writeQuiet("/proc/sys/net/bridge/"+f, "0\n")
			}
		}
	}
	if name == "useradd" {
		user := args[len(args)-1]
		home := "/home/" + user
		line := fmt.Sprintf("%s:x:%d:%d:Terrarium admin:%s:/bin/bash\n", user, os.Getuid(), os.Getgid(), home)
		f, err := os.OpenFile(e.path("/etc/passwd"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if _, err := f.WriteString(line); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(e.path(home), 0o750); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (e *env) commands() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, len(e.cmds))
	for i, c := range e.cmds {
		out[i] = strings.Join(c, " ")
	}
	return out
}

func (e *env) resetCommands() {
	e.mu.Lock()
	e.cmds = nil
	e.mu.Unlock()
}

// now is a clock that advances a second on every call.
func (e *env) now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.clockNow = e.clockNow.Add(time.Second)
	return e.clockNow
}

// sourceOf adapts a test's source function into a provider: ok=false and
// no error is an absent config.
func sourceOf(src func(ctx context.Context) ([]byte, string, bool, error)) configsource.Provider {
	return configsource.Func{N: "test", F: func(ctx context.Context) (*configsource.Found, error) {
		data, from, ok, err := src(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("test source: %w", configsource.ErrAbsent)
		}
		return &configsource.Found{Config: data, Source: from}, nil
	}}
}

func (e *env) options(src func(ctx context.Context) ([]byte, string, bool, error)) Options {
	return e.optionsWith(sourceOf(src))
}

// optionsWith probes the providers for enrollment and for changes.
func (e *env) optionsWith(providers ...configsource.Provider) Options {
	return Options{
		Host:          e.host(),
		Cluster:       e.clusterDeps(),
		Console:       &e.console,
		Log:           slog.New(slog.DiscardHandler),
		Sources:       providers,
		ChangeSources: providers,
		BootLoader:    e.loader,
		Reboot: func(ctx context.Context) error {
			e.mu.Lock()
			e.reboots++
			e.mu.Unlock()
			return nil
		},
		PollInterval:     time.Millisecond,
		AddressWait:      0,
		TrialRebootDelay: time.Millisecond,
		TimeSync:         timesync.Sync{Wait: time.Second, Every: time.Millisecond},
		Media:            &e.media,
	}
}

// run runs firstboot with a config source that always returns config.
func (e *env) run(config string) error {
	e.t.Helper()
	return e.runWith(staticSource(config))
}

func (e *env) runWith(src func(ctx context.Context) ([]byte, string, bool, error)) error {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Run(ctx, e.options(src))
}

func (e *env) runWithProviders(providers ...configsource.Provider) error {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Run(ctx, e.optionsWith(providers...))
}

func staticSource(config string) func(ctx context.Context) ([]byte, string, bool, error) {
	return func(ctx context.Context) ([]byte, string, bool, error) {
		return []byte(config), configFrom, true, nil
	}
}

// sourceResult is one answer of a config source: ok=false and err=nil
// means no config disk.
type sourceResult struct {
	data string
	ok   bool
	err  error
}

// sequenceSource returns the results in order, repeating the last one; the
// counter tells how often it was called.
func sequenceSource(results ...sourceResult) (func(ctx context.Context) ([]byte, string, bool, error), *int) {
	calls := new(int)
	return func(ctx context.Context) ([]byte, string, bool, error) {
		r := results[min(*calls, len(results)-1)]
		*calls++
		if !r.ok && r.err == nil {
			return nil, "", false, nil
		}
		return []byte(r.data), configFrom, r.ok, r.err
	}, calls
}

func (e *env) journal() *nodestate.Journal {
	e.t.Helper()
	j, err := e.state().ReadJournal()
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func (e *env) lastBoot() nodestate.BootRecord {
	e.t.Helper()
	j := e.journal()
	if len(j.Boots) == 0 {
		e.t.Fatal("journal has no boots")
	}
	return j.Boots[len(j.Boots)-1]
}

func (e *env) status() status.Status {
	e.t.Helper()
	var s status.Status
	if err := json.Unmarshal([]byte(e.read(status.File)), &s); err != nil {
		e.t.Fatalf("status.json: %v", err)
	}
	return s
}

// statusIfAny is status.json while firstboot runs: nil when it is not
// there (yet) or not whole.
func (e *env) statusIfAny() *status.Status {
	b, err := os.ReadFile(e.path(status.File))
	if err != nil {
		return nil
	}
	var s status.Status
	if json.Unmarshal(b, &s) != nil {
		return nil
	}
	return &s
}

// consoleStatuses parses every "terrarium-status: {json}" line on the
// console, in order.
func (e *env) consoleStatuses() []status.Status {
	e.t.Helper()
	var out []status.Status
	for _, line := range strings.Split(e.console.String(), "\n") {
		js, ok := strings.CutPrefix(line, "terrarium-status: ")
		if !ok {
			continue
		}
		var s status.Status
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			e.t.Fatalf("console status line %q: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

func stepResults(r nodestate.BootRecord) []string {
	var out []string
	for _, s := range r.Steps {
		out = append(out, s.Name+"="+string(s.Result))
	}
	return out
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// fakeLoader is a bootloader.BootLoader that records its calls.
type fakeLoader struct {
	mu        sync.Mutex
	trial     bool
	trialErr  error
	result    bootloader.BlessResult
	blessErr  error
	blessed   []layout.Slot
	trialAsks []layout.Slot
}

func (l *fakeLoader) OnTrial(ctx context.Context, slot layout.Slot) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trialAsks = append(l.trialAsks, slot)
	return l.trial, l.trialErr
}

func (l *fakeLoader) Bless(ctx context.Context, slot layout.Slot) (bootloader.BlessResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blessed = append(l.blessed, slot)
	if l.blessErr != nil {
		return "", l.blessErr
	}
	return l.result, nil
}

func (l *fakeLoader) blessCalls() []layout.Slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.blessed)
}

var errFake = errors.New("fake error")

func (e *env) host() *host.Host {
	ex := e.exec
	if e.hostExec != nil {
		ex = e.hostExec
	}
	withChrony := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "chronyc" {
			// Following the init node.
			return []byte(chronyTracking), nil
		}
		return ex(ctx, name, args...)
	}
	return &host.Host{Root: e.root, Executor: host.ExecFunc(withChrony), Clock: host.ClockFunc(e.now)}
}

// clusterDeps answer the cluster's questions from the env: a fake
// runtime, a fake API, a probe that finds every API ready, no waits.
func (e *env) clusterDeps() kubeadmflow.Deps {
	attempts := e.attempts
	if attempts == 0 {
		attempts = 3
	}
	return kubeadmflow.Deps{
		Runtime: fakeRuntime{e},
		API: func(kubeconfig string) (kubeadmflow.APIClient, error) {
			nodes := e.nodes
			if nodes == nil {
				nodes = []string{"cp-1", "w-1"}
			}
			deleted := func(name string) {
				e.mu.Lock()
				defer e.mu.Unlock()
				e.deletedNodes = append(e.deletedNodes, name)
			}
			applied := func(objs []string) {
				e.mu.Lock()
				defer e.mu.Unlock()
				e.cmds = append(e.cmds, append([]string{"api-apply"}, objs...))
			}
			return fakeAPI{kubeconfig: kubeconfig, leases: &e.leases, configMaps: &e.configMaps, nodes: nodes, deleted: deleted, applied: applied}, nil
		},
		Probe: func(caPEM string) (kubeadmflow.ProbeFunc, func()) {
			return func(ctx context.Context, url string) (int, []byte, error) { return 200, e.probeBody(url), nil }, func() {}
		},
		// Every API server runs the bundle's Kubernetes, unless the test
		// says otherwise (env.apiVersions, by endpoint; "" does not answer).
		APIVersion: func(ctx context.Context, kubeconfig, endpoint string) (string, error) {
			e.mu.Lock()
			v, ok := e.apiVersions[endpoint]
			e.mu.Unlock()
			switch {
			case !ok:
				return "v1.36.3", nil
			case v == "":
				return "", errors.New("connection refused")
			}
			return v, nil
		},
		KubeletCSRs: func(ctx context.Context, kubeconfig, pkiDir string) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.csrSigners = append(e.csrSigners, kubeconfig+" "+pkiDir)
			return nil
		},
		Backups:       etcdbackup.FromStick(e.host(), &e.media),
		VolumeBackups: volumebackup.FromStick(e.host(), &e.media),
		Volumes:       mountedVolumes{},
		Timing:        kubeadmflow.Timing{APIPoll: time.Millisecond, FilePoll: time.Millisecond, StepRetry: time.Millisecond, StepAttempts: attempts},
	}
}

// fakeRuntime answers the host's CRI questions from the env, recording
// each as a command ("cri-check ENDPOINT", "cri-pull REF", "cri-running
// NAME").
type fakeRuntime struct{ e *env }

func (f fakeRuntime) Check(ctx context.Context, endpoint string) (cri.Info, error) {
	e := f.e
	e.mu.Lock()
	e.cmds = append(e.cmds, []string{"cri-check", endpoint})
	rt := e.runtime
	e.mu.Unlock()
	if rt != nil {
		return rt(ctx, endpoint)
	}
	return cri.Info{RuntimeName: "containerd", RuntimeVersion: "v2.3.7", APIVersion: "v1", CgroupDriver: "systemd"}, nil
}

func (f fakeRuntime) Pull(ctx context.Context, endpoint, ref string) (bool, error) {
	e := f.e
	e.mu.Lock()
	e.cmds = append(e.cmds, []string{"cri-pull", ref})
	pull := e.pull
	e.mu.Unlock()
	if pull != nil {
		return pull(ctx, ref)
	}
	return true, nil
}

func (f fakeRuntime) Running(ctx context.Context, endpoint, name string) (bool, error) {
	e := f.e
	e.mu.Lock()
	e.cmds = append(e.cmds, []string{"cri-running", name})
	running := e.running
	e.mu.Unlock()
	return running == nil || running(name), nil
}

// fakeAPI is a cluster of Ready nodes as the API shows them: only the
// admin may list them, or write Leases.
type fakeAPI struct {
	kubeconfig string
	leases     *fakeLeases
	configMaps *fakeConfigMaps
	nodes      []string
	deleted    func(name string)
	// applied records a manifest's objects applied as a command
	// ("api-apply Kind ns/name ...").
	applied func(objs []string)
}

// fakeLeases keeps Leases as the API does: a new resourceVersion at every
// write, a conflict for a write at an old one.
type fakeLeases struct {
	mu      sync.Mutex
	byName  map[string]kubeclient.Lease
	version int
}

func (f *fakeLeases) get(name string) (kubeclient.Lease, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.byName[name]
	return l, ok
}

// put writes a Lease as another node would.
func (f *fakeLeases) put(l kubeclient.Lease) kubeclient.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.putLocked(l)
}

func (f *fakeLeases) putLocked(l kubeclient.Lease) kubeclient.Lease {
	if f.byName == nil {
		f.byName = map[string]kubeclient.Lease{}
	}
	f.version++
	l.ResourceVersion = fmt.Sprint(f.version)
	f.byName[l.Name] = l
	return l
}

func (f fakeAPI) admin() error {
	if f.kubeconfig != kubeadmflow.AdminKubeconfig {
		return &kubeclient.StatusError{Code: 403, Status: "403 Forbidden", Body: "as " + f.kubeconfig}
	}
	return nil
}

func (f fakeAPI) Lease(ctx context.Context, ns, name string) (kubeclient.Lease, error) {
	if err := f.admin(); err != nil {
		return kubeclient.Lease{}, err
	}
	l, ok := f.leases.get(name)
	if !ok || l.Namespace != ns {
		return kubeclient.Lease{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	return l, nil
}

func (f fakeAPI) CreateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	if err := f.admin(); err != nil {
		return kubeclient.Lease{}, err
	}
	if _, ok := f.leases.get(l.Name); ok {
		return kubeclient.Lease{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return f.leases.put(l), nil
}

func (f fakeAPI) UpdateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	if err := f.admin(); err != nil {
		return kubeclient.Lease{}, err
	}
	return f.leases.swap(l)
}

// swap writes l if the stored Lease is still at l's version.
func (f *fakeLeases) swap(l kubeclient.Lease) (kubeclient.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.byName[l.Name]; !ok || cur.ResourceVersion != l.ResourceVersion {
		return kubeclient.Lease{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return f.putLocked(l), nil
}

func (f fakeAPI) Nodes(ctx context.Context) ([]kubeclient.Node, error) {
	if f.kubeconfig != kubeadmflow.AdminKubeconfig {
		return nil, fmt.Errorf("GET /api/v1/nodes: 403 Forbidden (as %s)", f.kubeconfig)
	}
	var out []kubeclient.Node
	for _, n := range f.nodes {
		out = append(out, kubeclient.Node{Name: n, Ready: true, ControlPlane: strings.HasPrefix(n, "cp-")})
	}
	return out, nil
}

func (f fakeAPI) Node(ctx context.Context, name string) (kubeclient.Node, error) {
	if f.kubeconfig == kubeadmflow.JoinKubeconfig {
		// A joiner asks before its kubelet registers: no Node yet.
		return kubeclient.Node{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	if !slices.Contains(f.nodes, name) {
		return kubeclient.Node{}, fmt.Errorf("GET /api/v1/nodes/%s: 404 Not Found", name)
	}
	return kubeclient.Node{Name: name, Ready: true}, nil
}

// ConfigMap answers the cluster's kubelet configuration (kubeadm's
// kubelet-config), to the join token and the admin.
func (f fakeAPI) ConfigMap(ctx context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	if f.kubeconfig != kubeadmflow.JoinKubeconfig && f.kubeconfig != kubeadmflow.AdminKubeconfig {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 403, Status: "403 Forbidden", Body: "as " + f.kubeconfig}
	}
	if data, ok := f.configMaps.get(ns + "/" + name); ok {
		return kubeclient.ConfigMap{Namespace: ns, Name: name, Data: data}, nil
	}
	if ns+"/"+name != "kube-system/kubelet-config" {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	return kubeclient.ConfigMap{Namespace: ns, Name: name, Data: map[string]string{"kubelet": "apiVersion: kubelet.config.k8s.io/v1beta1\n" +
		"kind: KubeletConfiguration\ncgroupDriver: systemd\nclusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\nrotateCertificates: true\n"}}, nil
}

// ApplyManifest parses the manifest as the real client does and records
// its objects, in order.
func (f fakeAPI) ApplyManifest(ctx context.Context, manifest []byte, fieldManager string) error {
	if err := f.admin(); err != nil {
		return err
	}
	objs, err := kubeclient.ParseManifest(manifest)
	if err != nil {
		return err
	}
	names := []string{"as " + fieldManager}
	for _, o := range objs {
		names = append(names, o.String())
	}
	f.applied(names)
	var cm struct {
		Kind     string
		Metadata struct{ Namespace, Name string }
		Data     map[string]string
	}
	if json.Unmarshal(manifest, &cm) == nil && cm.Kind == "ConfigMap" {
		f.configMaps.merge(cm.Metadata.Namespace+"/"+cm.Metadata.Name, cm.Data)
	}
	return nil
}

// fakeConfigMaps keeps the ConfigMaps applied as JSON, their data merged
// key by key as server-side apply merges one field manager's keys.
type fakeConfigMaps struct {
	mu     sync.Mutex
	byName map[string]map[string]string
}

func (f *fakeConfigMaps) get(name string) (map[string]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.byName[name]
	return maps.Clone(d), ok
}

func (f *fakeConfigMaps) merge(name string, data map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byName == nil {
		f.byName = map[string]map[string]string{}
	}
	if f.byName[name] == nil {
		f.byName[name] = map[string]string{}
	}
	maps.Copy(f.byName[name], data)
}

func (f fakeAPI) DeleteNode(ctx context.Context, name string) error {
	if err := f.admin(); err != nil {
		return err
	}
	if !slices.Contains(f.nodes, name) {
		return fmt.Errorf("delete node %s: %w", name, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"})
	}
	f.deleted(name)
	return nil
}

// fakeMedia are sticks as directories under the host root, by label.
type fakeMedia struct {
	mu     sync.Mutex
	sticks map[string]media.Medium // label -> medium
	dirs   map[string]string       // device -> directory on the host
	uses   int
	seq    int // the kernel's disk sequence: one more per insertion
}

func (f *fakeMedia) insert(label, device, dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sticks == nil {
		f.sticks, f.dirs = map[string]media.Medium{}, map[string]string{}
	}
	f.seq++
	f.sticks[label] = media.Medium{Device: device, Label: label, Insertion: fmt.Sprintf("%s#%d", device, f.seq)}
	f.dirs[device] = dir
}

func (f *fakeMedia) remove(label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sticks, label)
}

func (f *fakeMedia) Find(labels ...string) (media.Medium, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range labels {
		if m, ok := f.sticks[l]; ok {
			return m, true
		}
	}
	return media.Medium{}, false
}

func (f *fakeMedia) Use(ctx context.Context, m media.Medium, writable bool, fn func(dir string) error) error {
	f.mu.Lock()
	dir := f.dirs[m.Device]
	f.uses++
	f.mu.Unlock()
	return fn(dir)
}

// runUntil runs firstboot with o until its status file satisfies done,
// then cancels it and returns Run's error (context.Canceled when it was
// still waiting). It waits for the state, not for a deadline a loaded
// machine can miss.
func (e *env) runUntil(o Options, done func(s *status.Status) bool) error {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, o) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(time.Minute)
	for {
		select {
		case err := <-ran:
			e.t.Fatalf("Run returned before its status said so: %v\n%s", err, e.console.String())
		case <-limit:
			cancel()
			err := <-ran
			e.t.Fatalf("Run's status never got there in a minute (Run: %v); last: %+v", err, e.statusIfAny())
		case <-tick.C:
			if s := e.statusIfAny(); s != nil && done(s) {
				cancel()
				return <-ran
			}
		}
	}
}

// inState is a runUntil condition: the status says state.
func inState(state string) func(*status.Status) bool {
	return func(s *status.Status) bool { return s.State == state }
}

// consoleBanners returns every banner printed on a console.
func consoleBanners(console string) []string {
	var out []string
	var cur []string
	for _, l := range strings.Split(console, "\n") {
		switch {
		case strings.HasPrefix(l, "╭"):
			cur = []string{l}
		case cur != nil:
			cur = append(cur, l)
			if strings.HasPrefix(l, "╰") {
				out = append(out, strings.Join(cur, "\n")+"\n")
				cur = nil
			}
		}
	}
	return out
}

// mountedVolumes is a volume area that is there and mounted: the tests
// here do not make one (pkg/node/kube/localvolumes does).
type mountedVolumes struct{}

func (mountedVolumes) Ensure(context.Context, localvolumes.Spec) (localvolumes.Result, error) {
	return localvolumes.Result{Size: 1 << 30}, nil
}

func (mountedVolumes) Check() error { return nil }

// syncBuffer is a console a test reads while the node runs and writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}
