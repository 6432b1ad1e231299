package firstboot

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotinstall"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/leaselock"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
)

// fakeCluster is the API of a cluster of cp-1 (control plane) and w-1
// (worker): kube-system's ConfigMaps, nodes, pods and evictions. A node
// (user system:node:<name>, group system:nodes) may do to a ConfigMap
// only what the Roles and RoleBindings the admin applied grant, as the
// API's RBAC authorizer judges it (a rule naming objects grants no
// create), and, by the NodeRestriction plugin's limits, cordons itself
// only and evicts only its own pods. The admin (a control plane's
// admin.conf) may do anything. Every ConfigMap write is logged with its
// writer.
type fakeCluster struct {
	mu       sync.Mutex
	cms      map[string]kubeclient.ConfigMap // kube-system's, by name
	version  int
	roles    map[string][]rbacRule
	bindings map[string]rbacBinding
	nodes    []kubeclient.Node
	pods     map[string][]kubeclient.Pod
	guarded  map[string]int // pod -> evictions its budget refuses yet
	cordoned map[string]bool
	cordons  []string
	// writes are "WRITER VERB NAME" of every ConfigMap written.
	writes []string
}

type rbacRule struct {
	Resources     []string `yaml:"resources"`
	ResourceNames []string `yaml:"resourceNames"`
	Verbs         []string `yaml:"verbs"`
}

type rbacBinding struct {
	role     string
	subjects []string // "User NAME", "Group NAME"
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{
		pods: map[string][]kubeclient.Pod{
			"cp-1": {{Namespace: "kube-system", Name: "etcd-cp-1", Mirror: true, Phase: "Running"}},
			"w-1": {
				{Namespace: "default", Name: "web-1", Phase: "Running"},
				{Namespace: "kube-flannel", Name: "flannel-w", DaemonSet: true, Phase: "Running"},
			},
		},
		nodes:    []kubeclient.Node{{Name: "cp-1", ControlPlane: true, Ready: true}, {Name: "w-1", Ready: true}},
		guarded:  map[string]int{"web-1": 2},
		cordoned: map[string]bool{},
		cms:      map[string]kubeclient.ConfigMap{},
		roles:    map[string][]rbacRule{},
		bindings: map[string]rbacBinding{},
	}
}

// allows says whether RBAC lets node verb the ConfigMap name.
func (c *fakeCluster) allows(node, verb, name string) bool {
	who := []string{"User system:node:" + node, "Group system:nodes", "Group system:authenticated"}
	for _, b := range c.bindings {
		if !slices.ContainsFunc(b.subjects, func(s string) bool { return slices.Contains(who, s) }) {
			continue
		}
		for _, r := range c.roles[b.role] {
			named := len(r.ResourceNames) > 0
			if slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, verb) &&
				(!named || (verb != "create" && slices.Contains(r.ResourceNames, name))) {
				return true
			}
		}
	}
	return false
}

// apply applies a manifest as the admin: ConfigMaps created if missing
// (their data kept), Roles and RoleBindings replaced.
func (c *fakeCluster) apply(manifest []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	for {
		var o struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name      string `yaml:"name"`
				Namespace string `yaml:"namespace"`
			} `yaml:"metadata"`
			Rules   []rbacRule `yaml:"rules"`
			RoleRef struct {
				Name string `yaml:"name"`
			} `yaml:"roleRef"`
			Subjects []struct{ Kind, Name string } `yaml:"subjects"`
		}
		if err := dec.Decode(&o); err != nil {
			return nil // io.EOF: the manifest parses (kubeclient's tests hold the rest)
		}
		if o.Metadata.Namespace != rollout.Namespace && o.Kind != "" {
			return fmt.Errorf("%s %s outside kube-system", o.Kind, o.Metadata.Name)
		}
		switch o.Kind {
		case "ConfigMap":
			if _, ok := c.cms[o.Metadata.Name]; !ok {
				c.save("admin", "create", kubeclient.ConfigMap{Namespace: rollout.Namespace, Name: o.Metadata.Name})
			}
		case "Role":
			c.roles[o.Metadata.Name] = o.Rules
		case "RoleBinding":
			b := rbacBinding{role: o.RoleRef.Name}
			for _, s := range o.Subjects {
				b.subjects = append(b.subjects, s.Kind+" "+s.Name)
			}
			c.bindings[o.Metadata.Name] = b
		}
	}
}

// save stores m at a new version, logging who wrote it; c.mu is held.
func (c *fakeCluster) save(who, verb string, m kubeclient.ConfigMap) kubeclient.ConfigMap {
	c.version++
	m.ResourceVersion = fmt.Sprint(c.version)
	c.cms[m.Name] = m
	c.writes = append(c.writes, who+" "+verb+" "+m.Name)
	return m
}

// as is the API as node, with its kubelet's credentials.
func (c *fakeCluster) as(node string) func() (rollouts.API, error) {
	return func() (rollouts.API, error) { return &nodeAPI{c: c, node: node}, nil }
}

// admin is the API as the cluster's admin.
func (c *fakeCluster) admin() (rollouts.AdminAPI, error) { return &adminAPI{c: c}, nil }

func (c *fakeCluster) record(t *testing.T) rollout.Record {
	t.Helper()
	r, err := rollout.Load(context.Background(), &adminAPI{c: c})
	require.NoError(t, err)
	return r
}

// setRecord writes the record as the admin (or a forger with its
// credential) would.
func (c *fakeCluster) setRecord(t *testing.T, change func(r *rollout.Record)) {
	t.Helper()
	_, err := rollout.Update(context.Background(), &adminAPI{c: c}, func(r *rollout.Record) error { change(r); return nil })
	require.NoError(t, err)
}

func (c *fakeCluster) phaseOf(t *testing.T, node string) string {
	r := c.record(t)
	if r.Rollout == nil {
		return ""
	}
	n, _ := r.Rollout.Node(node)
	return n.Phase
}

// statusOf is node's own status object.
func (c *fakeCluster) statusOf(t *testing.T, node string) rollout.Status {
	t.Helper()
	s, err := rollout.LoadStatus(context.Background(), &adminAPI{c: c}, node)
	require.NoError(t, err)
	return s
}

// writesBy are the ConfigMaps who wrote, as "VERB NAME".
func (c *fakeCluster) writesBy(who string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, w := range c.writes {
		if rest, ok := strings.CutPrefix(w, who+" "); ok {
			out = append(out, rest)
		}
	}
	return out
}

var forbidden = &kubeclient.StatusError{Code: 403, Status: "403 Forbidden"}

func notFound() error { return &kubeclient.StatusError{Code: 404, Status: "404 Not Found"} }

// get returns a copy of the ConfigMap name; c.mu is held.
func (c *fakeCluster) get(ns, name string) (kubeclient.ConfigMap, error) {
	cur, ok := c.cms[name]
	if !ok || ns != rollout.Namespace {
		return kubeclient.ConfigMap{}, notFound()
	}
	m := cur
	m.Data = map[string]string{}
	for k, v := range cur.Data {
		m.Data[k] = v
	}
	return m, nil
}

// update writes m if it is at the stored version; c.mu is held.
func (c *fakeCluster) update(who string, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	if cur, ok := c.cms[m.Name]; !ok || cur.ResourceVersion != m.ResourceVersion {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return c.save(who, "update", m), nil
}

type nodeAPI struct {
	c    *fakeCluster
	node string
}

func (a *nodeAPI) ConfigMap(_ context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if !a.c.allows(a.node, "get", name) {
		return kubeclient.ConfigMap{}, forbidden
	}
	return a.c.get(ns, name)
}

func (a *nodeAPI) CreateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if !a.c.allows(a.node, "create", m.Name) {
		return kubeclient.ConfigMap{}, forbidden
	}
	if _, ok := a.c.cms[m.Name]; ok {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return a.c.save("system:node:"+a.node, "create", m), nil
}

func (a *nodeAPI) UpdateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if !a.c.allows(a.node, "update", m.Name) {
		return kubeclient.ConfigMap{}, forbidden
	}
	return a.c.update("system:node:"+a.node, m)
}

func (a *nodeAPI) Cordon(_ context.Context, name string, u bool) error {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if name != a.node {
		return forbidden
	}
	a.c.cordoned[name] = u
	a.c.cordons = append(a.c.cordons, fmt.Sprintf("%s=%t", name, u))
	return nil
}

func (a *nodeAPI) PodsOn(_ context.Context, node string) ([]kubeclient.Pod, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if node != a.node { // the Node authorizer: its own pods only
		return nil, forbidden
	}
	return append([]kubeclient.Pod(nil), a.c.pods[node]...), nil
}

func (a *nodeAPI) Evict(_ context.Context, p kubeclient.Pod) error {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	for i, q := range a.c.pods[a.node] {
		if q.Name != p.Name {
			continue
		}
		if a.c.guarded[p.Name] > 0 {
			a.c.guarded[p.Name]--
			return &kubeclient.StatusError{Code: 429, Status: "429 Too Many Requests"}
		}
		a.c.pods[a.node] = append(a.c.pods[a.node][:i:i], a.c.pods[a.node][i+1:]...)
		return nil
	}
	return forbidden // not bound to this node
}

// adminAPI is the API as the cluster's admin.
type adminAPI struct{ c *fakeCluster }

func (a *adminAPI) ConfigMap(_ context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	return a.c.get(ns, name)
}

func (a *adminAPI) CreateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if _, ok := a.c.cms[m.Name]; ok {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return a.c.save("admin", "create", m), nil
}

func (a *adminAPI) UpdateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	return a.c.update("admin", m)
}

func (a *adminAPI) Nodes(context.Context) ([]kubeclient.Node, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	return append([]kubeclient.Node(nil), a.c.nodes...), nil
}

func (a *adminAPI) ApplyManifest(_ context.Context, manifest []byte, _ string) error {
	return a.c.apply(manifest)
}

// rolloutNode is one node of the fake cluster, formed, its slot trusting
// key, its registry serving its upgrade share.
type rolloutNode struct {
	e    *env
	o    Options
	inst *fakeInstaller
	name string
	srv  *httptest.Server
	// policies are the policies the node installed under; steps are
	// its stages and arms, and whether it was cordoned then.
	mu       sync.Mutex
	policies []upgrade.Policy
	steps    []string
}

func newRolloutNode(t *testing.T, c *fakeCluster, name string, pub signature.PublicKey) *rolloutNode {
	t.Helper()
	e, _ := clusterEnv(t, "")
	require.NoError(t, e.run(clusterConfig(t, name)), e.console.String())
	e.setBootID("22222222-2222-2222-2222-222222222222")
	e.write(layout.UpgradeKeysFile, pub.String()+"\n")
	n := &rolloutNode{e: e, inst: &fakeInstaller{}, name: name}
	srv, err := registry.New(registry.WithStores(registry.OpenLiveLayout(e.path(layout.UpgradesDir))))
	require.NoError(t, err)
	n.srv = httptest.NewServer(srv)
	t.Cleanup(n.srv.Close)
	n.o = e.optionsWith(noStick())
	n.o.Install = func(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (slotinstall.Result, error) {
		n.mu.Lock()
		n.policies = append(n.policies, policy)
		n.mu.Unlock()
		return n.inst.install(ctx, v, running, installed, policy, report)
	}
	step := func(what string) {
		c.mu.Lock()
		cordoned := c.cordoned[name]
		c.mu.Unlock()
		n.mu.Lock()
		n.steps = append(n.steps, fmt.Sprintf("%s, cordoned %t", what, cordoned))
		n.mu.Unlock()
	}
	n.o.Stage = func(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (slotinstall.Result, error) {
		n.mu.Lock()
		n.policies = append(n.policies, policy)
		n.mu.Unlock()
		step("stage " + v.Manifest().Version)
		return n.inst.stage(ctx, v, running, installed, policy, report)
	}
	n.o.Arm = func(ctx context.Context, staged slotinstall.Result, report host.Reporter) (slotinstall.Result, error) {
		step("arm " + staged.Manifest.Version)
		return n.inst.arm(ctx, staged, report)
	}
	n.o.Rollout = rollouts.Options{API: c.as(name), ShareDir: layout.UpgradesDir, Poll: time.Millisecond,
		Drain: rollout.DrainOptions{Poll: time.Millisecond, Timeout: time.Minute}}
	if strings.HasPrefix(name, "cp-") {
		n.o.Rollout.Admin = c.admin // a worker has no admin.conf
	}
	return n
}

// stagedAndArmed are the node's stages and arms, in order, each with
// whether the node was cordoned then.
func (n *rolloutNode) stagedAndArmed() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.steps...)
}

func (n *rolloutNode) installedUnder() []upgrade.Policy {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]upgrade.Policy(nil), n.policies...)
}

// peers makes n fetch from the registries of others.
func (n *rolloutNode) peers(others ...*rolloutNode) {
	var urls []string
	for _, o := range others {
		urls = append(urls, o.srv.URL)
	}
	n.o.Rollout.Peers = func() (upgradeshare.Peers, error) { return registry.NewFetcher(urls, nil) }
}

// runInBackground runs n's firstboot, watching, until stop is called.
func (n *rolloutNode) runInBackground(t *testing.T) (stop func()) {
	t.Helper()
	o := n.o
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

// trialBoot boots n into slot b running version, as after an installed
// upgrade's reboot.
func (n *rolloutNode) trialBoot(version, bootID string) {
	n.e.setBootID(bootID)
	n.e.write("/proc/cmdline", "BOOT_IMAGE=/terrarium/b/vmlinuz root=PARTLABEL=TERRA-B ro terrarium.slot=b quiet\n")
	n.e.setReleaseVersion(version)
}

// request runs n's firstboot and asks it, as `firstboot upgrade [--force]
// FILE` does, to install the upgrade file at path; it returns the answer
// once the node rebooted or refused.
func (n *rolloutNode) request(t *testing.T, path string, force bool) (nodestate.UpgradeResult, error) {
	t.Helper()
	o := n.o
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	reboots := n.e.rebootCount()
	var out strings.Builder
	res, err := RequestUpgrade(ctx, UpgradeOptions{Host: o.Host, Out: &out, Path: path, Force: force, Wait: 10 * time.Second, Poll: time.Millisecond})
	if err == nil && res.Outcome == nodestate.OutcomePublished {
		require.Eventually(t, func() bool { return n.e.rebootCount() > reboots }, 10*time.Second, time.Millisecond, "installed and rebooted")
	}
	cancel()
	require.NoError(t, <-done)
	return res, err
}

// signedFile is the upgrade file at path on e: its digest, version and
// signed manifest.
func signedFile(t *testing.T, e *env, path string) (digest, version string, in rollout.Instructions) {
	t.Helper()
	b, err := os.ReadFile(e.path(path))
	require.NoError(t, err)
	f, err := upgrade.Open(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	manifest, sig := f.SignedManifest()
	return upgrade.Digest(manifest), f.Manifest().Version, rollout.Instructions{Manifest: string(manifest), ManifestSignature: string(sig)}
}

// forceOf is a force instruction of the upgrade file at path on e,
// signed with key, valid until expires (the env's clock reads mid-2025).
func forceOf(t *testing.T, e *env, key ed25519.PrivateKey, path string, expires time.Time) string {
	t.Helper()
	digest, version, _ := signedFile(t, e, path)
	b, err := upgrade.SignInstruction(key, upgrade.Instruction{Action: upgrade.ActionForce, Digest: digest, Version: version, Expires: expires})
	require.NoError(t, err)
	return string(b)
}

// inTime is an expiry after every test's clock; expired one before.
var (
	inTime  = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	expired = time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
)

// rolloutCluster is cp-1 and w-1, formed, their slots trusting one key,
// the init node's manifest (addons.Upgrades) applied, and a stick of
// 1.3.0 signed with that key put into cp-1, which published it and,
// first in the rollout, installed it and rebooted.
func rolloutCluster(t *testing.T) (c *fakeCluster, cp, w *rolloutNode, key ed25519.PrivateKey) {
	t.Helper()
	return rolloutClusterKube(t, "")
}

// twoRolloutNodes is a formed cluster of cp-1 and w-1, each serving its
// peer and trusting pub, the key of key, for upgrades.
func twoRolloutNodes(t *testing.T) (c *fakeCluster, cp, w *rolloutNode, key ed25519.PrivateKey, pub signature.PublicKey) {
	t.Helper()
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	c = newFakeCluster()
	cp = newRolloutNode(t, c, "cp-1", pub)
	w = newRolloutNode(t, c, "w-1", pub)
	cp.peers(w)
	w.peers(cp)
	require.NoError(t, c.apply(addons.Upgrades))
	return c, cp, w, key, pub
}

// rolloutClusterKube is rolloutCluster with a stick whose upgrade carries
// Kubernetes kube ("" for none).
func rolloutClusterKube(t *testing.T, kube string) (c *fakeCluster, cp, w *rolloutNode, key ed25519.PrivateKey) {
	t.Helper()
	c, cp, w, key, _ = twoRolloutNodes(t)
	runsVersion(t, c, "w-1", "1.2.3")
	cp.e.upgradeStickKube(key, "/stick", "1.3.0", kube)
	cp.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	cp.e.runWatching(t, cp.o, func() bool { return cp.e.rebootCount() == 1 })
	return c, cp, w, key
}

// onlyOwnStatus checks that no node wrote any ConfigMap but its own
// status object, and only the admin the record.
func onlyOwnStatus(t *testing.T, c *fakeCluster) {
	t.Helper()
	for _, n := range []string{"cp-1", "w-1"} {
		for _, w := range c.writesBy("system:node:" + n) {
			assert.Equal(t, "update "+rollout.StatusName(n), w, "%s wrote only its own status", n)
		}
	}
	for _, w := range c.writes {
		if strings.HasSuffix(w, " "+rollout.ConfigMapName) {
			assert.True(t, strings.HasPrefix(w, "admin "), "the record is the admin's: %s", w)
		}
	}
}

// One stick in a control plane upgrades the cluster: published there,
// then each node in turn (control plane first) staged, drained, armed,
// rebooted into its trial, and once blessed uncordoned and done; the
// worker fetches the upgrade from its peer and stages it while the
// control plane takes its turn, and its own turn only arms it. Each node reports in its own status object and a control
// plane folds the reports into the record: the worker's done moves the
// record only when the control plane looks. No node wrote anything but
// its own status; no node holds a lock.
func TestOneStickUpgradesTheCluster(t *testing.T) {
	c, cp, w, _ := rolloutCluster(t)
	assert.Contains(t, cp.e.console.String(), "upgrade: 1.3.0 is rolling out to the cluster's 2 nodes, one at a time, control planes first")
	assert.Contains(t, cp.e.console.String(), "checking every part on the way")
	assert.NotContains(t, cp.e.console.String(), "every part before anything is written", "the stick is read once")
	assert.Equal(t, []string{"1.3.0"}, cp.inst.calls())
	assert.Equal(t, rollout.NodeTrial, c.statusOf(t, "cp-1").Phase, "cp-1 reports in its own object")
	assert.Equal(t, rollout.NodeWaiting, c.phaseOf(t, "w-1"))
	assert.True(t, c.cordoned["cp-1"])
	assert.NotContains(t, c.cms, rollout.LockName, "no node locks anything")
	r := c.record(t)
	require.NotNil(t, r.Instructions, "the rollout carries the upgrade's signed manifest")
	assert.NotEmpty(t, r.Instructions.ManifestSignature)
	assert.False(t, r.Rollout.Forced)

	// While the control plane is on trial, the worker, whose turn has
	// not come, fetches the upgrade from cp-1's registry and stages it:
	// schedulable, nothing armed, waiting.
	stopWorker := w.runInBackground(t)
	require.Eventually(t, func() bool {
		return strings.Contains(w.e.console.String(), "this node drains and reboots into it at its turn")
	},
		15*time.Second, time.Millisecond, w.e.console.String())
	assert.Equal(t, []string{"stage 1.3.0, cordoned false"}, w.stagedAndArmed(), "staged before its turn")
	assert.Empty(t, c.statusOf(t, "w-1").Phase, "no turn reported")
	c.mu.Lock()
	assert.False(t, c.cordoned["w-1"], "still schedulable")
	c.mu.Unlock()
	assert.Zero(t, w.e.rebootCount())
	assert.True(t, strings.HasPrefix(w.e.status().Upgrade, "1.3.0: rolling, 0 of 2 nodes done, cp-1 "), w.e.status().Upgrade)
	assert.Contains(t, w.e.console.String(), "rollout: fetching 1.3.0 from the cluster's registries")
	fetched, err := os.ReadFile(w.e.path(layout.UpgradesDir + "/index.json"))
	require.NoError(t, err)
	assert.Contains(t, string(fetched), `"org.opencontainers.image.ref.name":"1.3.0"`)

	// cp-1's trial boot is healthy: blessed, committed, uncordoned, done.
	cp.e.media.remove(layout.LabelUpgradeFAT)
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeDone })
	assert.Equal(t, nodestate.UpgradeCommitted, cp.e.journal().Upgrade.State)
	c.mu.Lock()
	assert.False(t, c.cordoned["cp-1"])
	c.mu.Unlock()

	// The worker's turn, in the same boot: drained (its budget refuses
	// twice), the slot it staged armed without writing it again,
	// rebooted into.
	require.Eventually(t, func() bool { return w.e.rebootCount() == 1 }, 15*time.Second, time.Millisecond, w.e.console.String())
	stopWorker()
	assert.Equal(t, []string{"1.3.0"}, w.inst.calls(), "written once")
	assert.Equal(t, []upgrade.Policy{upgrade.Refuse}, w.installedUnder())
	assert.Equal(t, []string{"stage 1.3.0, cordoned false", "arm 1.3.0, cordoned true"}, cp.stagedAndArmed(), "written while serving, armed once drained")
	assert.Equal(t, []string{"stage 1.3.0, cordoned false", "arm 1.3.0, cordoned true"}, w.stagedAndArmed(), "written before its turn, armed once drained")
	assert.Contains(t, w.e.console.String(), "rollout: upgrading this node to 1.3.0, staged in slot b before its turn")
	assert.Contains(t, w.e.console.String(), "draining node w-1: waiting for default/web-1 (its disruption budget allows no eviction now)")
	assert.Equal(t, []kubeclient.Pod{{Namespace: "kube-flannel", Name: "flannel-w", DaemonSet: true, Phase: "Running"}}, c.pods["w-1"])
	assert.Equal(t, rollout.NodeTrial, c.statusOf(t, "w-1").Phase)

	w.trialBoot("1.3.0", "44444444-4444-4444-4444-444444444444")
	w.e.runWatching(t, w.o, func() bool { return c.statusOf(t, "w-1").Phase == rollout.NodeDone })
	assert.Equal(t, rollout.Rolling, c.record(t).Rollout.Phase, "only a control plane moves the record")
	cp.e.runWatching(t, cp.o, func() bool { return c.record(t).Rollout.Phase == rollout.Done })
	r = c.record(t)
	assert.Equal(t, "1.3.0: done, 2 of 2 nodes done", r.Summary())
	assert.Equal(t, []string{"cp-1", "w-1"}, r.Reporting)
	assert.Equal(t, []string{"cp-1=true", "cp-1=false", "w-1=true", "w-1=false"}, c.cordons)
	onlyOwnStatus(t, c)
	assert.NotEmpty(t, c.writesBy("system:node:w-1"))
}

// A worker stages before its turn without asking the API servers, which
// may be rebooting then (here the control plane does not answer); the
// Kubernetes skew against them is checked at its turn, before the arm. A
// minor upgrade the control plane does not run yet is refused there: the
// worker is put back in service, its running slot still the one it
// boots, and the rollout stops saying why.
func TestPrestagedSkewIsCheckedAtTheArm(t *testing.T) {
	c, cp, w, _ := rolloutClusterKube(t, "v1.37.0")
	const api = "10.77.0.10:6443"
	w.e.mu.Lock()
	w.e.apiVersions = map[string]string{api: ""} // cp-1 reboots into its trial
	w.e.mu.Unlock()
	stopWorker := w.runInBackground(t)
	require.Eventually(t, func() bool {
		return strings.Contains(w.e.console.String(), "this node drains and reboots into it at its turn")
	},
		15*time.Second, time.Millisecond, w.e.console.String())
	assert.NotContains(t, w.e.console.String(), "upgrade refused")
	assert.Empty(t, w.e.status().Message, "nothing refused")

	// cp-1 is done, but still runs v1.36.3 (its trial did not move
	// Kubernetes here): the worker's turn refuses the arm.
	w.e.mu.Lock()
	w.e.apiVersions = map[string]string{api: "v1.36.3"}
	w.e.mu.Unlock()
	cp.e.media.remove(layout.LabelUpgradeFAT)
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeDone })
	require.Eventually(t, func() bool { return c.statusOf(t, "w-1").Phase == rollout.NodeFailed }, 15*time.Second, time.Millisecond, w.e.console.String())
	stopWorker()

	s := c.statusOf(t, "w-1")
	assert.True(t, strings.HasPrefix(s.Detail, "arm: "), s.Detail)
	assert.Contains(t, s.Detail, "the cluster's API servers are behind")
	assertStagedNeverArmed(t, c, w)
}

// assertStagedNeverArmed checks a worker whose turn failed after its
// stage: back in service, its staged slot never armed, nothing recorded
// that boots it.
func assertStagedNeverArmed(t *testing.T, c *fakeCluster, w *rolloutNode) {
	t.Helper()
	assert.Equal(t, []string{"stage 1.3.0, cordoned false"}, w.stagedAndArmed(), "staged, never armed")
	c.mu.Lock()
	assert.False(t, c.cordoned["w-1"], "back in service")
	c.mu.Unlock()
	assert.Zero(t, w.e.rebootCount())
	assert.Nil(t, w.e.journal().Upgrade, "no upgrade recorded: nothing boots it")
}

// A drain that fails after the upgrade was staged stops the rollout with
// the node back in service, its running slot still the one it boots:
// the staged slot is never armed.
func TestDrainFailureAfterTheStage(t *testing.T) {
	c, cp, w, _ := rolloutCluster(t)
	cp.e.media.remove(layout.LabelUpgradeFAT)
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeDone })

	c.mu.Lock()
	c.guarded["web-1"] = 1 << 30 // its budget never allows the eviction
	c.mu.Unlock()
	w.o.Rollout.Drain.Timeout = 50 * time.Millisecond
	w.e.runWatching(t, w.o, func() bool { return c.statusOf(t, "w-1").Phase == rollout.NodeFailed })

	s := c.statusOf(t, "w-1")
	assert.True(t, strings.HasPrefix(s.Detail, "drain: "), s.Detail)
	assertStagedNeverArmed(t, c, w)
}

// A node whose trial fails falls back and reports the upgrade rolled
// back: the control plane marks it bad and stops the rollout, the other
// node never installs it, a stick of it is refused anywhere in the
// cluster, and the worker remembers the mark. --force alone does not
// start it again in a cluster; a force instruction signed by a key
// trusted for upgrades, beside the file, does: the mark is cleared, the
// control plane installs it again despite its own rollback (which it
// does not report a second time), and the worker, whose turn comes,
// honors the signed force over the mark it remembered.
func TestRollbackStopsTheRolloutAndMarksItBad(t *testing.T) {
	c, cp, w, key := rolloutCluster(t)
	cp.e.media.remove(layout.LabelUpgradeFAT)

	// The trial boot fails its health check three times; the boot loader
	// falls back to slot a.
	failTrial(t, cp.e)
	cp.e.setBootID("55555555-5555-5555-5555-555555555555")
	cp.e.console.Reset()
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeRolledBack })
	assert.Contains(t, cp.e.console.String(), "rollout: this node is rolled-back (")
	r := c.record(t)
	digest := r.Rollout.Digest
	assert.Equal(t, rollout.Stopped, r.Rollout.Phase)
	bad := r.BadUpgrade(digest)
	require.NotNil(t, bad)
	assert.Equal(t, "cp-1", bad.Node)
	assert.Contains(t, bad.Reason, "injected fault")
	assert.False(t, c.cordoned["cp-1"], "back in service")

	// The worker does nothing; a stick of the same file in it is refused
	// by the cluster's mark before anything is written, and the worker
	// remembers the mark in its own status.
	w.e.upgradeStickSame(t, cp.e, "/stick", "/wstick")
	w.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/wstick")
	w.e.runWatching(t, w.o, func() bool {
		return stepsSay(w.e, "upgrade=refused")() && c.statusOf(t, "w-1").BadUpgrade(digest) != nil
	})
	assert.Contains(t, w.e.console.String(), "rolled back in this cluster and is not installed again on its own: 1.3.0 rolled back on cp-1")
	assert.Empty(t, w.inst.calls())
	assert.Equal(t, rollout.NodeWaiting, c.phaseOf(t, "w-1"))
	w.e.media.remove(layout.LabelUpgradeFAT)

	// `firstboot upgrade --force` without a force instruction: a cluster
	// forces nothing on an unsigned word.
	cp.e.upgradeStickSame(t, cp.e, "/stick", "/home/admin")
	res, err := cp.request(t, "/home/admin/terrarium-1.3.0.upgrade", true)
	assert.ErrorIs(t, err, ErrUpgradeRefused)
	assert.Contains(t, res.Detail, "a forced upgrade of a cluster needs a force instruction signed by a key trusted for upgrades beside the upgrade file")
	assert.Equal(t, []string{"1.3.0"}, cp.inst.calls())
	rec := c.record(t)
	assert.NotNil(t, rec.BadUpgrade(digest), "still marked")

	// With the instruction (imagebuild upgrade force) beside the file.
	cp.e.write("/home/admin/terrarium-1.3.0.upgrade.force", forceOf(t, cp.e, key, "/home/admin/terrarium-1.3.0.upgrade", inTime))
	res, err = cp.request(t, "/home/admin/terrarium-1.3.0.upgrade", true)
	require.NoError(t, err)
	assert.Equal(t, nodestate.OutcomePublished, res.Outcome)
	assert.Contains(t, res.Detail, "forced by its signed instruction")
	assert.Equal(t, []string{"1.3.0", "1.3.0"}, cp.inst.calls(), "installed again despite its own rollback")
	assert.Equal(t, upgrade.Force, cp.installedUnder()[1])
	r = c.record(t)
	assert.Nil(t, r.BadUpgrade(digest), "forcing cleared the mark, and the old rollback was not reported again")
	assert.True(t, r.Rollout.Forced)
	require.NotNil(t, r.Instructions)
	assert.Contains(t, r.Instructions.Force, "terrarium upgrade instruction v1\nforce "+digest)
	assert.Equal(t, rollout.Rolling, r.Rollout.Phase)
	assert.Equal(t, rollout.NodeTrial, c.statusOf(t, "cp-1").Phase)

	// Blessed this time; the worker's turn: it installs, forced, what it
	// remembered bad.
	cp.trialBoot("1.3.0", "66666666-6666-6666-6666-666666666666")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeDone })
	w.e.runWatching(t, w.o, func() bool { return w.e.rebootCount() == 1 })
	assert.Equal(t, []string{"1.3.0"}, w.inst.calls())
	assert.Equal(t, []upgrade.Policy{upgrade.Force}, w.installedUnder())
	assert.Nil(t, c.statusOf(t, "w-1").BadUpgrade(digest), "a verified force cleared the worker's memory of the mark")
	onlyOwnStatus(t, c)
}

// failTrial records a failed health check of the upgrade's trial boot
// in slot b, as the new slot's firstboot would.
func failTrial(t *testing.T, e *env) {
	t.Helper()
	store, err := e.state().OpenJournal()
	require.NoError(t, err)
	require.NoError(t, store.Update(func(j *nodestate.Journal) {
		rec := j.Current("bbbbbbbb-0000-0000-0000-000000000001", "b")
		rec.Steps = append(rec.Steps, nodestate.StepRecord{Name: "health", Result: "failed",
			Detail: "health check failed: this build carries the injected fault \"health\"", At: time.Now()})
	}))
}

// upgradeStickSame copies the upgrade file on another env's stick to dir.
func (e *env) upgradeStickSame(t *testing.T, from *env, fromDir, dir string) {
	t.Helper()
	name := "terrarium-1.3.0.upgrade"
	b, err := os.ReadFile(from.path(fromDir + "/" + name))
	require.NoError(t, err)
	e.write(dir+"/"+name, string(b))
}

// A record that lies about what a node is to do moves no node: the node
// whose turn it is refuses it, with what does not hold, before it
// drains or installs anything, and says so in its own status (which
// stops the rollout). Forged or stale: a force flag without a signed
// instruction over a mark this node holds, a bad list cleared, an older
// release's unsigned force of an upgrade this node rolled back, a force
// instruction by an untrusted key, expired or about another upgrade, a
// changed digest or version, a manifest no trusted key signed, a worker
// listed as a control plane.
func TestForgedRecordsAreRefused(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	other, _, err := signature.GenerateKey()
	require.NoError(t, err)
	for _, tt := range []struct {
		name string
		// forge writes the record (with the worker's turn come: cp-1
		// done) from the rollout of 1.3.0 unforced, signed by key.
		forge func(t *testing.T, e *env, r *rollout.Record)
		// markedBad: the worker remembers the cluster's mark on 1.3.0;
		// rolledBack: 1.3.0 rolled back on the worker itself.
		markedBad, rolledBack bool
		want                  []string
	}{
		{
			name:      "a forced flag without a signed instruction, over a mark the node holds",
			forge:     func(_ *testing.T, _ *env, r *rollout.Record) { r.Rollout.Forced = true },
			markedBad: true,
			want: []string{"refused: this upgrade rolled back in this cluster and is not installed again on its own: 1.3.0 rolled back on cp-1",
				"the rollout says forced, but no force instruction signed by a key this node trusts for upgrades comes with it"},
		},
		{
			name:      "the bad list cleared",
			forge:     func(*testing.T, *env, *rollout.Record) {},
			markedBad: true,
			want:      []string{"refused: this upgrade rolled back in this cluster and is not installed again on its own: 1.3.0 rolled back on cp-1 at 2025-05-31T00:00:00Z (health failed)"},
		},
		{
			name:       "an older release's record forcing an upgrade this node rolled back",
			forge:      func(_ *testing.T, _ *env, r *rollout.Record) { r.Instructions, r.Rollout.Forced = nil, true },
			rolledBack: true,
			want: []string{"refused: this upgrade was rolled back on this node before and is not installed again on its own: 1.3.0 rolled back",
				"the rollout says forced, but no force instruction signed by a key this node trusts"},
		},
		{
			name: "a force instruction by an untrusted key",
			forge: func(t *testing.T, e *env, r *rollout.Record) {
				r.Instructions.Force, r.Rollout.Forced = forceOf(t, e, other, "/up/terrarium-1.3.0.upgrade", inTime), true
			},
			markedBad: true,
			want:      []string{"refused: the rollout's instructions do not verify, so this node does not act on them: its force instruction: signed by key"},
		},
		{
			name: "an expired force instruction",
			forge: func(t *testing.T, e *env, r *rollout.Record) {
				r.Instructions.Force, r.Rollout.Forced = forceOf(t, e, key, "/up/terrarium-1.3.0.upgrade", expired), true
			},
			want: []string{"its force instruction: the instruction has expired", "valid until 2025-05-01T00:00:00Z"},
		},
		{
			name: "a force instruction of another upgrade",
			forge: func(t *testing.T, e *env, r *rollout.Record) {
				r.Instructions.Force, r.Rollout.Forced = forceOf(t, e, key, "/up/terrarium-1.3.1.upgrade", inTime), true
			},
			want: []string{"its force instruction: the instruction is about another upgrade file: it forces 1.3.1"},
		},
		{
			name: "a changed digest",
			forge: func(t *testing.T, e *env, r *rollout.Record) {
				d, _, _ := signedFile(t, e, "/up/terrarium-1.3.1.upgrade")
				r.Rollout.Digest, r.Instructions.Digest = d, d
			},
			want: []string{"the record names the upgrade sha256:", "and its signed manifest is sha256:"},
		},
		{
			name:  "a changed version",
			forge: func(_ *testing.T, _ *env, r *rollout.Record) { r.Rollout.Version = "1.4.0" },
			want:  []string{"the record names version 1.4.0, and its signed manifest says 1.3.0"},
		},
		{
			name: "a manifest no trusted key signed",
			forge: func(t *testing.T, e *env, r *rollout.Record) {
				e.upgradeStick(other, "/other", "1.3.0")
				d, _, in := signedFile(t, e, "/other/terrarium-1.3.0.upgrade")
				in.Digest = d
				r.Rollout.Digest, r.Instructions = d, &in
			},
			want: []string{"the upgrade file is signed by a key that is not trusted"},
		},
		{
			name: "the worker listed as a control plane",
			forge: func(_ *testing.T, _ *env, r *rollout.Record) {
				r.Rollout.Nodes[1].ControlPlane = true
			},
			want: []string{"the rollout lists this node (w-1) as a control plane, which it is not"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster()
			w := newRolloutNode(t, c, "w-1", pub)
			require.NoError(t, c.apply(addons.Upgrades))
			objs, err := addons.NodeUpgradeStatus([]string{"cp-1", "w-1"})
			require.NoError(t, err)
			require.NoError(t, c.apply(objs))
			w.e.upgradeStick(key, "/up", "1.3.0")
			w.e.upgradeStick(key, "/up", "1.3.1")
			digest, _, in := signedFile(t, w.e, "/up/terrarium-1.3.0.upgrade")
			at := time.Date(2025, 5, 31, 0, 0, 0, 0, time.UTC)
			if tt.markedBad {
				_, err := rollout.UpdateStatus(context.Background(), &adminAPI{c: c}, "w-1", func(s *rollout.Status) (bool, error) {
					s.Remember(rollout.Bad{Digest: digest, Version: "1.3.0", Node: "cp-1", Reason: "health failed", At: at})
					return true, nil
				})
				require.NoError(t, err)
			}
			if tt.rolledBack {
				store, err := w.e.state().OpenJournal()
				require.NoError(t, err)
				require.NoError(t, store.Update(func(j *nodestate.Journal) {
					j.BadUpgrades = append(j.BadUpgrades, nodestate.BadUpgrade{Digest: digest, Version: "1.3.0", Reason: "kubelet failed", At: at})
				}))
			}
			c.setRecord(t, func(r *rollout.Record) {
				u := rollout.Upgrade{Digest: digest, Version: "1.3.0", Ref: "terrarium.internal/upgrade@sha256:" + strings.Repeat("1", 64), Instructions: in}
				require.NoError(t, r.Start(u, []rollout.Member{{Name: "cp-1", ControlPlane: true}, {Name: "w-1"}}, "cp-1", at))
				require.NoError(t, r.Set(digest, "cp-1", rollout.NodeDone, "runs 1.3.0, blessed", at))
				tt.forge(t, w.e, r)
			})
			w.e.runWatching(t, w.o, func() bool { return c.statusOf(t, "w-1").Phase == rollout.NodeFailed })
			s := c.statusOf(t, "w-1")
			for _, want := range tt.want {
				assert.Contains(t, s.Detail, want)
				assert.Contains(t, w.e.console.String(), strings.TrimPrefix(want, "refused: "))
			}
			assert.Contains(t, w.e.console.String(), "refused on this node, nothing was done")
			assert.Empty(t, c.cordons, "not drained")
			assert.Empty(t, w.inst.calls(), "nothing installed")
			onlyOwnStatus(t, c)
		})
	}
}

// A record an older release wrote (no signed instructions, its force an
// unsigned flag) still moves a node of this release: it installs the
// upgrade, whose file it verifies, as it would unforced.
func TestRecordOfAnOlderRelease(t *testing.T) {
	c, cp, w, _ := rolloutCluster(t)
	cp.e.media.remove(layout.LabelUpgradeFAT)
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeDone })
	c.setRecord(t, func(r *rollout.Record) { r.Instructions, r.Rollout.Forced = nil, true })

	w.e.runWatching(t, w.o, func() bool { return w.e.rebootCount() == 1 })
	assert.Equal(t, []string{"1.3.0"}, w.inst.calls())
	assert.Equal(t, []upgrade.Policy{upgrade.Refuse}, w.installedUnder(), "an unsigned force forces nothing")
	assert.Equal(t, rollout.NodeTrial, c.statusOf(t, "w-1").Phase)
}

// A node of a release before signed rollouts, whose turn it is, gets the
// record's write and the old lock for its turn alone, by its own user;
// once it reports through its own status object (it upgraded), the
// control plane takes the write back and frees the lock it held.
func TestLegacyTurnGetsTheRecordForItsTurn(t *testing.T) {
	_, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	c := newFakeCluster()
	cp := newRolloutNode(t, c, "cp-1", pub)
	// The record as a control plane of the older release left it, with
	// group system:nodes allowed to write it and the lock.
	require.NoError(t, c.apply([]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: "terrarium:node-upgrades", namespace: kube-system}
rules:
- {apiGroups: [""], resources: [configmaps], resourceNames: [terrarium-upgrades, terrarium-upgrade-lock], verbs: [get, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "terrarium:node-upgrades", namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "terrarium:node-upgrades"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: terrarium-upgrades, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: terrarium-upgrade-lock, namespace: kube-system}
`)))
	at := time.Date(2025, 5, 31, 0, 0, 0, 0, time.UTC)
	c.setRecord(t, func(r *rollout.Record) {
		u := rollout.Upgrade{Digest: "sha256:" + strings.Repeat("a", 64), Version: "1.3.0", Ref: "terrarium.internal/upgrade@sha256:" + strings.Repeat("1", 64)}
		require.NoError(t, r.Start(u, []rollout.Member{{Name: "cp-1", ControlPlane: true}, {Name: "w-1"}}, "cp-1", at))
		require.NoError(t, r.Set(u.Digest, "cp-1", rollout.NodeDone, "", at))
	})
	ctx := context.Background()
	asW := &nodeAPI{c: c, node: "w-1"}
	write := func(name string) error {
		m, err := asW.ConfigMap(ctx, rollout.Namespace, name)
		if err != nil {
			return err
		}
		_, err = asW.UpdateConfigMap(ctx, m)
		return err
	}
	require.NoError(t, write(rollout.ConfigMapName), "the older release's rights")

	// cp-1 runs this release: every node loses the record's write, and
	// w-1, whose turn it is and which never reported, gets it back for
	// its turn.
	cp.e.runWatching(t, cp.o, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return slices.Equal(c.bindings[addons.LegacyUpgradesName].subjects, []string{"User system:node:w-1"})
	})
	assert.Contains(t, cp.e.console.String(), "rollout: w-1 runs a release before signed rollouts: for its turn alone")
	assert.False(t, c.allows("cp-1", "update", rollout.ConfigMapName), "no other node writes the record")
	require.NoError(t, write(rollout.ConfigMapName), "w-1 records its phase itself, as its release does")
	lock := leaselock.InConfigMap(asW)
	l, err := lock.Lease(ctx, rollout.Namespace, rollout.LockName)
	require.NoError(t, err)
	l.Holder = "w-1"
	_, err = lock.UpdateLease(ctx, l)
	require.NoError(t, err, "and takes the old lock for its turn")

	// w-1 upgraded: it reports in its own object; the write goes.
	_, err = rollout.UpdateStatus(ctx, asW, "w-1", func(s *rollout.Status) (bool, error) { s.Version = "1.3.0"; return true, nil })
	require.NoError(t, err)
	cp.e.runWatching(t, cp.o, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.bindings[addons.LegacyUpgradesName].subjects == nil
	})
	assert.ErrorIs(t, write(rollout.ConfigMapName), forbidden)
	l, err = leaselock.InConfigMap(&adminAPI{c: c}).Lease(ctx, rollout.Namespace, rollout.LockName)
	require.NoError(t, err)
	assert.Empty(t, l.Holder, "the control plane freed the lock w-1 held")
	assert.Contains(t, c.record(t).Reporting, "w-1")
}

// A turn whose node gives no sign is broken by a control plane: the
// rollout stops, saying why, and no node holds the cluster.
func TestStaleTurnIsBroken(t *testing.T) {
	_, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	c := newFakeCluster()
	cp := newRolloutNode(t, c, "cp-1", pub)
	cp.o.Rollout.StaleTurn = 30 * time.Second // the env's clock moves a second a look
	require.NoError(t, c.apply(addons.Upgrades))
	at := time.Date(2025, 5, 31, 0, 0, 0, 0, time.UTC)
	c.setRecord(t, func(r *rollout.Record) {
		u := rollout.Upgrade{Digest: "sha256:" + strings.Repeat("a", 64), Version: "1.3.0", Ref: "terrarium.internal/upgrade@sha256:" + strings.Repeat("1", 64)}
		require.NoError(t, r.Start(u, []rollout.Member{{Name: "cp-1", ControlPlane: true}, {Name: "w-1"}}, "cp-1", at))
		require.NoError(t, r.Set(u.Digest, "cp-1", rollout.NodeDone, "", at))
		require.NoError(t, r.Set(u.Digest, "w-1", rollout.NodeDraining, "", at))
	})
	cp.e.runWatching(t, cp.o, func() bool { return c.record(t).Rollout.Phase == rollout.Stopped })
	r := c.record(t)
	assert.Equal(t, "w-1 gave no sign in its turn for 30s, and control plane cp-1 stopped the rollout (the same stick starts it again)", r.Rollout.Reason)
	assert.Contains(t, cp.e.console.String(), "rollout: w-1 gave no sign in its turn for 30s")
}

// What a node's credential may do to the upgrades' objects, as the API's
// RBAC judges the manifests a control plane applies: read the record,
// read and update its own status object; nothing else, not another
// node's status, not the record, not the old lock, no create.
func TestNodeWritesOnlyItsOwnStatus(t *testing.T) {
	c := newFakeCluster()
	require.NoError(t, c.apply(addons.Upgrades))
	objs, err := addons.NodeUpgradeStatus([]string{"cp-1", "w-1"})
	require.NoError(t, err)
	require.NoError(t, c.apply(objs))
	grant, err := addons.LegacyUpgradeGrant("")
	require.NoError(t, err)
	require.NoError(t, c.apply(grant))
	for _, tt := range []struct {
		node, verb, name string
		allowed          bool
	}{
		{"w-1", "get", rollout.ConfigMapName, true},
		{"w-1", "update", rollout.ConfigMapName, false},
		{"w-1", "get", rollout.StatusName("w-1"), true},
		{"w-1", "update", rollout.StatusName("w-1"), true},
		{"w-1", "create", rollout.StatusName("w-1"), false},
		{"w-1", "get", rollout.StatusName("cp-1"), false},
		{"w-1", "update", rollout.StatusName("cp-1"), false},
		{"w-1", "get", rollout.LockName, false},
		{"w-1", "update", rollout.LockName, false},
		{"cp-1", "update", rollout.StatusName("w-1"), false},
		{"cp-1", "update", rollout.ConfigMapName, false},
		{"w-2", "update", rollout.StatusName("w-1"), false},
		{"w-1", "update", "kubeadm-config", false},
	} {
		t.Run(tt.node+" "+tt.verb+" "+tt.name, func(t *testing.T) {
			assert.Equal(t, tt.allowed, c.allows(tt.node, tt.verb, tt.name))
		})
	}
}

// A worker cannot publish (its registry serves no peer): the stick is
// refused with where to put it.
func TestWorkerStickPointsToAControlPlane(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	c := newFakeCluster()
	w := newRolloutNode(t, c, "w-1", pub)
	w.e.upgradeStick(key, "/stick", "1.3.0")
	w.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	w.e.runWatching(t, w.o, stepsSay(w.e, "upgrade=refused"))
	assert.Contains(t, w.e.console.String(), "insert the stick into a control plane")
	assert.Empty(t, w.inst.calls())
	assert.Empty(t, c.cms)
}

// A stick in a control plane is read once: each part is checked as it is
// copied into the upgrade share. One whose signature is good but whose
// kernel differs is refused there, naming the part: the share keeps
// nothing of it, the cluster's record names no rollout, and nothing is
// written into a slot.
func TestCorruptStickInAControlPlaneIsNotPublished(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	c := newFakeCluster()
	cp := newRolloutNode(t, c, "cp-1", pub)
	require.NoError(t, c.apply(addons.Upgrades))
	runsVersion(t, c, "w-1", "1.2.3")
	cp.e.upgradeStick(key, "/stick", "1.3.0")
	damagePart(t, cp.e.path("/stick/terrarium-1.3.0.upgrade"), "vmlinuz of 1.3.0")
	cp.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	cp.e.runWatching(t, cp.o, stepsSay(cp.e, "upgrade=refused"))

	console := cp.e.console.String()
	assert.Contains(t, console, "checking every part on the way")
	assert.Contains(t, console, "upgrade refused, nothing was written: add upgrade 1.3.0 to the share: ")
	assert.Contains(t, console, "part vmlinuz differs from its signed manifest: content does not match its digest")
	assert.Empty(t, cp.inst.calls(), "no slot written")
	assert.Empty(t, c.record(t).Rollout, "no rollout started")
	index, err := os.ReadFile(cp.e.path(layout.UpgradesDir + "/index.json"))
	require.NoError(t, err)
	assert.NotContains(t, string(index), "1.3.0", "the share names nothing")
	data, err := os.ReadFile(cp.e.path("/stick/terrarium-1.3.0.upgrade"))
	require.NoError(t, err)
	f, err := upgrade.Open(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	names := shareBlobs(t, cp.e)
	require.NotEmpty(t, f.Manifest().Parts)
	for _, p := range f.Manifest().Parts {
		assert.NotContains(t, names, p.SHA256, "part %s is not kept", p.Name)
	}
	manifest, _ := f.SignedManifest()
	assert.NotContains(t, names, fmt.Sprintf("%x", sha256.Sum256(manifest)), "nor its manifest")
}

// A node whose status says it runs an older release reads an upgrade
// share only of files whole: the control plane checks every part of the
// stick, then copies it whole into its share, and the worker fetches and
// stages it from there.
func TestStickForAClusterWithAnOlderNodeIsSharedWhole(t *testing.T) {
	c, cp, w, key, _ := twoRolloutNodes(t)
	runsVersion(t, c, "w-1", "1.2.0")
	cp.e.upgradeStick(key, "/stick", "1.3.0")
	cp.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	cp.e.runWatching(t, cp.o, func() bool { return cp.e.rebootCount() == 1 })
	assert.Contains(t, cp.e.console.String(), "upgrade: w-1 run a release older than this node's 1.2.3, which reads an upgrade share of files whole")

	share, err := upgradeshare.Open(cp.e.path(layout.UpgradesDir))
	require.NoError(t, err)
	list, err := share.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
	want, err := os.ReadFile(cp.e.path("/stick/terrarium-1.3.0.upgrade"))
	require.NoError(t, err)
	names := shareBlobs(t, cp.e)
	assert.Contains(t, names, fmt.Sprintf("%x", sha256.Sum256(want)), "the file whole is a blob")

	stopWorker := w.runInBackground(t)
	defer stopWorker()
	require.Eventually(t, func() bool {
		return strings.Contains(w.e.console.String(), "this node drains and reboots into it at its turn")
	}, 15*time.Second, time.Millisecond, w.e.console.String())
}

// shareBlobs names the blobs in e's upgrade share.
func shareBlobs(t *testing.T, e *env) []string {
	t.Helper()
	blobs, err := os.ReadDir(e.path(layout.UpgradesDir + "/blobs/sha256"))
	require.NoError(t, err)
	var names []string
	for _, b := range blobs {
		names = append(names, b.Name())
	}
	return names
}

// runsVersion writes into node's status object that it runs version, as
// its own controller does in a formed cluster (a control plane creates
// the object first).
func runsVersion(t *testing.T, c *fakeCluster, node, version string) {
	t.Helper()
	api := &adminAPI{c: c}
	if _, err := rollout.LoadStatus(context.Background(), api, node); errors.Is(err, rollout.ErrNoStatusObject) {
		_, err := api.CreateConfigMap(context.Background(), kubeclient.ConfigMap{Namespace: rollout.Namespace, Name: rollout.StatusName(node), Data: map[string]string{}})
		require.NoError(t, err)
	}
	_, err := rollout.UpdateStatus(context.Background(), api, node, func(s *rollout.Status) (bool, error) {
		s.Node, s.Version = node, version
		return true, nil
	})
	require.NoError(t, err)
}

// A forced stick in a control plane whose API is out of reach installs on
// that node alone: not copied into the share, so its every part is
// checked before the slot is written, and a damaged one is refused with
// nothing written.
func TestForcedStickWithTheAPIOutOfReachIsCheckedWhole(t *testing.T) {
	for _, damaged := range []bool{false, true} {
		t.Run(fmt.Sprintf("damaged=%v", damaged), func(t *testing.T) {
			key, pub, err := signature.GenerateKey()
			require.NoError(t, err)
			c := newFakeCluster()
			cp := newRolloutNode(t, c, "cp-1", pub)
			cp.o.Rollout.Admin = func() (rollouts.AdminAPI, error) {
				return nil, errors.New("dial tcp 10.77.0.10:6443: connection refused")
			}
			cp.e.upgradeStick(key, "/stick", "1.3.0")
			cp.e.write("/stick/terrarium-1.3.0.upgrade.force", forceOf(t, cp.e, key, "/stick/terrarium-1.3.0.upgrade", inTime))
			if damaged {
				damagePart(t, cp.e.path("/stick/terrarium-1.3.0.upgrade"), "vmlinuz of 1.3.0")
			}
			cp.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
			if damaged {
				cp.e.runWatching(t, cp.o, stepsSay(cp.e, "upgrade=refused"))
			} else {
				cp.e.runWatching(t, cp.o, func() bool { return cp.e.rebootCount() == 1 })
			}
			console := cp.e.console.String()
			assert.Contains(t, console, "forced: installing on this node alone")
			assert.Contains(t, console, "checking every part before anything is written")
			if damaged {
				assert.Contains(t, console, "upgrade refused, nothing was written: ")
				assert.Contains(t, console, "member vmlinuz: sha256 ")
				assert.Empty(t, cp.inst.calls())
				return
			}
			assert.Equal(t, []string{"1.3.0"}, cp.inst.calls())
		})
	}
}

// On a node alone, a force instruction beside the upgrade file on the
// stick forces it (here: an upgrade that rolled back on the node before);
// one by an untrusted key, or about another file, refuses the stick.
func TestForceInstructionOnAStick(t *testing.T) {
	for _, tt := range []struct {
		name  string
		force func(t *testing.T, e *env, key, other ed25519.PrivateKey) string
		want  string
	}{
		{"none", func(*testing.T, *env, ed25519.PrivateKey, ed25519.PrivateKey) string { return "" },
			"this upgrade was rolled back on this node before and is not installed again on its own"},
		{"signed by a trusted key", func(t *testing.T, e *env, key, _ ed25519.PrivateKey) string {
			return forceOf(t, e, key, "/stick/terrarium-1.3.0.upgrade", inTime)
		}, ""},
		{"signed by another key", func(t *testing.T, e *env, _, other ed25519.PrivateKey) string {
			return forceOf(t, e, other, "/stick/terrarium-1.3.0.upgrade", inTime)
		}, "the force instruction beside the upgrade file is refused: terrarium-1.3.0.upgrade.force: signed by key"},
		{"about another file", func(t *testing.T, e *env, key, _ ed25519.PrivateKey) string {
			e.upgradeStick(key, "/other", "1.3.1")
			return forceOf(t, e, key, "/other/terrarium-1.3.1.upgrade", inTime)
		}, "the instruction is about another upgrade file: it forces 1.3.1"},
		{"expired", func(t *testing.T, e *env, key, _ ed25519.PrivateKey) string {
			return forceOf(t, e, key, "/stick/terrarium-1.3.0.upgrade", expired)
		}, "the instruction has expired"},
		{"not an instruction", func(*testing.T, *env, ed25519.PrivateKey, ed25519.PrivateKey) string { return "force it\n" },
			"this is not an upgrade instruction as `imagebuild upgrade force` writes it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, o, inst, key := upgradeEnv(t)
			other, _, err := signature.GenerateKey()
			require.NoError(t, err)
			var policies []upgrade.Policy
			o.Install = func(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (slotinstall.Result, error) {
				policies = append(policies, policy)
				return inst.install(ctx, v, running, installed, policy, report)
			}
			e.upgradeStick(key, "/stick", "1.3.0")
			digest, _, _ := signedFile(t, e, "/stick/terrarium-1.3.0.upgrade")
			store, err := e.state().OpenJournal()
			require.NoError(t, err)
			require.NoError(t, store.Update(func(j *nodestate.Journal) {
				j.BadUpgrades = append(j.BadUpgrades, nodestate.BadUpgrade{Digest: digest, Version: "1.3.0", Reason: "kubelet failed", At: time.Now()})
			}))
			if f := tt.force(t, e, key, other); f != "" {
				e.write("/stick/terrarium-1.3.0.upgrade.force", f)
			}
			e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
			if tt.want != "" {
				e.runWatching(t, o, stepsSay(e, "upgrade=refused"))
				assert.Contains(t, e.console.String(), tt.want)
				assert.Empty(t, inst.calls())
				return
			}
			e.runWatching(t, o, func() bool { return e.rebootCount() == 1 })
			assert.Equal(t, []string{"1.3.0"}, inst.calls())
			assert.Equal(t, []upgrade.Policy{upgrade.Force}, policies)
			assert.Contains(t, e.console.String(), "upgrade: terrarium-1.3.0.upgrade.force forces it: force 1.3.0 ("+digest+") until 2030-01-01T00:00:00Z, signed by key")
		})
	}
}

func TestUpgradeStatusDrawsTheRollout(t *testing.T) {
	c := newFakeCluster()
	e, _ := clusterEnv(t, "")
	require.NoError(t, e.run(clusterConfig(t, "cp-1")), e.console.String())
	require.NoError(t, c.apply(addons.Upgrades))
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	c.setRecord(t, func(r *rollout.Record) {
		require.NoError(t, r.Start(rollout.Upgrade{Digest: "sha256:aa", Version: "1.3.0", Kubernetes: "v1.36.3", Ref: "x@sha256:bb"},
			[]rollout.Member{{Name: "cp-1", ControlPlane: true}, {Name: "w-1"}}, "cp-1", at))
		r.Bad = append(r.Bad, rollout.Bad{Digest: "sha256:cc", Version: "1.2.9", Node: "w-1", Reason: "kubelet failed", At: at})
		require.NoError(t, r.Set("sha256:aa", "cp-1", rollout.NodeDone, "runs 1.3.0, blessed", at.Add(time.Minute)))
		require.NoError(t, r.Set("sha256:aa", "w-1", rollout.NodeDraining, "", at.Add(2*time.Minute)))
	})
	var out strings.Builder
	require.NoError(t, UpgradeStatus(context.Background(), UpgradeStatusOptions{Host: e.host(), API: c.as("cp-1"), Out: &out}))
	assert.Equal(t, `this node  terrarium 1.2.3
rollout    1.3.0 (Kubernetes v1.36.3), started by cp-1 at 2026-11-26T10:00:00Z: rolling
           [████████████░░░░░░░░░░░░] 1 of 2 nodes done
           NODE  ROLE           PHASE       SINCE                 DETAIL
           cp-1  control plane  done        2026-11-26T10:01:00Z  runs 1.3.0, blessed
           w-1   worker         draining ◀  2026-11-26T10:02:00Z  
bad        1.2.9 rolled back on w-1 at 2026-11-26T10:00:00Z: kubelet failed (not installed again without a signed force instruction)
`, out.String())
}

// A node whose other slot holds the rollout's upgrade already, while it
// runs another version, is not done: its turn fails, it goes back in
// service and the rollout stops, saying what to do.
func TestOtherSlotHoldsItAlready(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	c := newFakeCluster()
	cp := newRolloutNode(t, c, "cp-1", pub)
	cp.peers()
	require.NoError(t, c.apply(addons.Upgrades))
	cp.inst.other = "1.3.0"
	cp.e.upgradeStick(key, "/stick", "1.3.0")
	cp.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeFailed })
	assert.Zero(t, cp.e.rebootCount())
	assert.False(t, c.cordoned["cp-1"])
	r := c.record(t)
	assert.Equal(t, rollout.Stopped, r.Rollout.Phase)
	assert.Contains(t, r.Rollout.Reason, "the other slot holds 1.3.0 already but this node runs 1.2.3")
}

// The stick left in through the control plane's trial boot is answered
// from its signed manifest, as the rollout it started goes on: never read
// whole again (one of its parts is damaged now, which a whole read would
// refuse), nor copied into the share again, nor installed again.
func TestStickLeftInThroughTheTrialIsNotReadAgain(t *testing.T) {
	c, cp, _, _ := rolloutCluster(t)
	damagePart(t, cp.e.path("/stick/terrarium-1.3.0.upgrade"), "rootfs.squashfs of 1.3.0")
	cp.e.console.Reset()
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	cp.e.runWatching(t, cp.o, func() bool {
		return c.phaseOf(t, "cp-1") == rollout.NodeDone && strings.Contains(cp.e.console.String(), "rolls out to the cluster already")
	})

	console := cp.e.console.String()
	assert.Contains(t, console, "upgrade: 1.3.0 rolls out to the cluster already, started by cp-1 at ")
	assert.NotContains(t, console, "every part")
	assert.NotContains(t, console, "the manifest says", "no part was read whole")
	assert.NotContains(t, console, "copying 1.3.0 into this node's upgrade share")
	assert.Equal(t, []string{"1.3.0"}, cp.inst.calls(), "installed once")
	assert.Equal(t, nodestate.UpgradeCommitted, cp.e.journal().Upgrade.State)
}

// Early in the trial boot the API may not answer yet: the stick of the
// version the node now runs is answered as installed, still without
// reading it whole.
func TestStickLeftInWhileTheAPIIsDownIsNotReadAgain(t *testing.T) {
	_, cp, _, _ := rolloutCluster(t)
	damagePart(t, cp.e.path("/stick/terrarium-1.3.0.upgrade"), "rootfs.squashfs of 1.3.0")
	cp.e.console.Reset()
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	o := cp.o
	o.Rollout.API = func() (rollouts.API, error) { return nil, errors.New("dial tcp 10.77.0.10:6443: connection refused") }
	cp.e.runWatching(t, o, func() bool { return strings.Contains(cp.e.console.String(), "is already installed") })

	console := cp.e.console.String()
	assert.Contains(t, console, "upgrade: terrarium-1.3.0.upgrade is already installed; nothing to do (the stick may be removed)")
	assert.NotContains(t, console, "the manifest says", "no part was read whole")
	assert.NotContains(t, console, "every part")
	assert.Equal(t, []string{"1.3.0"}, cp.inst.calls(), "installed once")
}

// fakeSlotStream records what a StageAlong was handed.
type fakeSlotStream struct {
	mu             sync.Mutex
	got, twin      bytes.Buffer
	finish         error
	finished, shut bool
}

func (f *fakeSlotStream) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got.Write(p)
}

func (f *fakeSlotStream) Finish(_ context.Context, twin io.Reader) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished = true
	if _, err := f.twin.ReadFrom(twin); err != nil {
		return err
	}
	return f.finish
}

func (f *fakeSlotStream) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shut = true
	return nil
}

// TestStickIsWrittenIntoTheSlotAlongTheShare: the control plane a stick
// is put into writes its slot from the reads that copy the rootfs into
// its share, then hands it the share's copy to compare; with an older
// member the share takes the file whole, and the slot waits for the turn;
// a stick whose rootfs differs from its manifest starts no rollout, and
// the slot it began to write has no entry.
func TestStickIsWrittenIntoTheSlotAlongTheShare(t *testing.T) {
	for _, tc := range []struct {
		name      string
		older     bool
		finishErr error
		corrupt   string // the part whose byte the stick flips
	}{
		{name: "along"},
		{name: "along, but the copies differ", finishErr: slotinstall.ErrCopiesDiffer},
		{name: "an older member", older: true},
		{name: "a rootfs that differs", corrupt: "rootfs.squashfs"},
		{name: "a kernel that differs", corrupt: "vmlinuz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cp, _, key, pub := twoRolloutNodes(t)
			runsVersion(t, c, "w-1", "1.2.3")
			if tc.older {
				runsVersion(t, c, "w-1", "1.2.0")
			}
			slot := &fakeSlotStream{finish: tc.finishErr}
			var begun []string
			cp.o.StageAlong = func(_ context.Context, v *upgrade.Verified, running layout.Slot, _ release.Release, _ upgrade.Policy, _ host.Reporter) (rollouts.SlotStream, slotinstall.Result, error) {
				begun = append(begun, v.Manifest().Version+" into the slot after "+string(running))
				return slot, slotinstall.Result{Changed: true}, nil
			}
			cp.e.upgradeStick(key, "/stick", "1.3.0")
			data, err := os.ReadFile(cp.e.path("/stick/terrarium-1.3.0.upgrade"))
			require.NoError(t, err)
			uf, err := upgrade.Open(bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			v, err := uf.VerifySignature([]signature.PublicKey{pub})
			require.NoError(t, err)
			part, _, err := v.Part("rootfs.squashfs")
			require.NoError(t, err)
			want, err := io.ReadAll(part)
			require.NoError(t, err)
			if tc.corrupt != "" {
				sr, _, err := v.Part(tc.corrupt)
				require.NoError(t, err)
				_, off, _ := sr.Outer()
				data[off+3] ^= 1
				cp.e.write("/stick/terrarium-1.3.0.upgrade", string(data))
			}
			cp.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
			if tc.corrupt != "" {
				cp.e.runWatching(t, cp.o, func() bool {
					return strings.Contains(cp.e.console.String(), "differs from its signed manifest")
				})
				console := cp.e.console.String()
				assert.Zero(t, cp.e.rebootCount())
				assert.False(t, slot.finished, "what the share did not keep is not staged")
				if tc.corrupt == "vmlinuz" {
					assert.Empty(t, begun, "every other part is checked before the slot is written")
					assert.NotContains(t, console, "while slot b was written")
					rec, err := rollout.Load(context.Background(), &adminAPI{c: c})
					require.NoError(t, err)
					assert.Nil(t, rec.Rollout, "no rollout started")
					return
				}
				assert.Equal(t, []string{"1.3.0 into the slot after a"}, begun)
				assert.True(t, slot.shut)
				rec, err := rollout.Load(context.Background(), &adminAPI{c: c})
				require.NoError(t, err)
				require.NotNil(t, rec.Rollout, "started once every other part matched")
				assert.Equal(t, rollout.Stopped, rec.Rollout.Phase)
				assert.Contains(t, rec.Rollout.Reason, "the copy of 1.3.0 from the stick failed")
				assert.Contains(t, console, "upgrade failed while slot b was written: add upgrade 1.3.0 to the share: part rootfs.squashfs differs from its signed manifest")
				assert.Contains(t, console, "slot b has no boot entry, and this node boots slot a as before")
				return
			}
			cp.e.runWatching(t, cp.o, func() bool { return cp.e.rebootCount() == 1 })
			console := cp.e.console.String()

			if tc.older {
				assert.Empty(t, begun, "a share of the file whole is not teed")
				assert.Zero(t, slot.got.Len())
				return
			}
			assert.Equal(t, []string{"1.3.0 into the slot after a"}, begun)
			assert.Contains(t, console, "upgrade: writing 1.3.0 into this node's other slot from the same reads")
			assert.Equal(t, want, slot.got.Bytes(), "the part, from the share's reads")
			assert.True(t, slot.finished)
			assert.Equal(t, want, slot.twin.Bytes(), "the share's copy to compare with")
			assert.True(t, slot.shut)
			if tc.finishErr != nil {
				assert.Contains(t, console, "upgrade: 1.3.0 was written into this node's other slot along its copy, but the slot and the other copy")
				assert.Contains(t, console, "this node's turn writes it again from the share")
			}
		})
	}
}
