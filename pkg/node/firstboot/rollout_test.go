package firstboot

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/leaselock"
	"github.com/terrarium-os/terrarium/pkg/node/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/registry"
	"github.com/terrarium-os/terrarium/pkg/node/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/upgradeshare"
)

// fakeCluster is the API of a cluster of cp-1 (control plane) and w-1
// (worker) as each node sees it with its kubelet's credentials: the
// rollout's ConfigMaps (the record and the lock), nodes, pods and
// evictions, with the NodeRestriction plugin's limits (a node cordons
// itself only, evicts only its own pods). It has no Leases: RolloutAPI
// has none, since the plugin lets a node write no Lease but its own
// heartbeat in kube-node-lease, whatever RBAC grants.
type fakeCluster struct {
	mu       sync.Mutex
	cms      map[string]kubeclient.ConfigMap // kube-system's, by name
	version  int
	pods     map[string][]kubeclient.Pod
	guarded  map[string]int // pod -> evictions its budget refuses yet
	cordoned map[string]bool
	cordons  []string
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
		guarded:  map[string]int{"web-1": 2},
		cordoned: map[string]bool{},
		cms:      map[string]kubeclient.ConfigMap{},
	}
}

// lockHolder is who holds the rollout's lock.
func (c *fakeCluster) lockHolder(t *testing.T) string {
	t.Helper()
	l, err := leaselock.InConfigMap(&nodeAPI{c: c}).Lease(context.Background(), rollout.Namespace, rollout.LockName)
	require.NoError(t, err, "the rollout's lock exists")
	return l.Holder
}

// applyUpgradesManifest creates what the init node's addons.Upgrades
// creates: the record's ConfigMap and the lock's, both empty.
func (c *fakeCluster) applyUpgradesManifest() {
	a := &nodeAPI{c: c}
	a.save(kubeclient.ConfigMap{Namespace: rollout.Namespace, Name: rollout.ConfigMapName})
	a.save(kubeclient.ConfigMap{Namespace: rollout.Namespace, Name: rollout.LockName})
}

// as is the API as node.
func (c *fakeCluster) as(node string) func() (RolloutAPI, error) {
	return func() (RolloutAPI, error) { return &nodeAPI{c: c, node: node}, nil }
}

func (c *fakeCluster) record(t *testing.T) rollout.Record {
	t.Helper()
	r, err := rollout.Load(context.Background(), &nodeAPI{c: c, node: "test"})
	require.NoError(t, err)
	return r
}

func (c *fakeCluster) phaseOf(t *testing.T, node string) string {
	r := c.record(t)
	if r.Rollout == nil {
		return ""
	}
	n, _ := r.Rollout.Node(node)
	return n.Phase
}

type nodeAPI struct {
	c    *fakeCluster
	node string
}

var forbidden = &kubeclient.StatusError{Code: 403, Status: "403 Forbidden"}

func (a *nodeAPI) ConfigMap(_ context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	cur, ok := a.c.cms[name]
	if !ok || ns != rollout.Namespace {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	m := cur
	m.Data = map[string]string{}
	for k, v := range cur.Data {
		m.Data[k] = v
	}
	return m, nil
}

func (a *nodeAPI) save(m kubeclient.ConfigMap) kubeclient.ConfigMap {
	a.c.version++
	m.ResourceVersion = fmt.Sprint(a.c.version)
	a.c.cms[m.Name] = m
	return m
}

// CreateConfigMap is refused: the init node's manifest created it, and a
// node may not create ConfigMaps (addons.Upgrades).
func (a *nodeAPI) CreateConfigMap(context.Context, kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	return kubeclient.ConfigMap{}, forbidden
}

func (a *nodeAPI) UpdateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if cur, ok := a.c.cms[m.Name]; !ok || cur.ResourceVersion != m.ResourceVersion {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 409, Status: "409 Conflict"}
	}
	return a.save(m), nil
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

// rolloutNode is one node of the fake cluster, formed, its slot trusting
// key, its registry serving its upgrade share.
type rolloutNode struct {
	e    *env
	o    Options
	inst *fakeInstaller
	name string
	srv  *httptest.Server
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
	n.o.Install = n.inst.install
	n.o.Rollout = Rollout{API: c.as(name), ShareDir: layout.UpgradesDir, Poll: time.Millisecond,
		Drain: rollout.DrainOptions{Poll: time.Millisecond, Timeout: time.Minute}, Lease: time.Hour}
	return n
}

// peers makes n fetch from the registries of others.
func (n *rolloutNode) peers(others ...*rolloutNode) {
	var urls []string
	for _, o := range others {
		urls = append(urls, o.srv.URL)
	}
	n.o.Rollout.Peers = func() (upgradeshare.Peers, error) { return registry.NewFetcher(urls, nil) }
}

// trialBoot boots n into slot b running version, as after an installed
// upgrade's reboot.
func (n *rolloutNode) trialBoot(version, bootID string) {
	n.e.setBootID(bootID)
	n.e.write("/proc/cmdline", "BOOT_IMAGE=/terrarium/b/vmlinuz root=PARTLABEL=TERRA-B ro terrarium.slot=b quiet\n")
	n.e.setReleaseVersion(version)
}

// rolloutCluster is cp-1 and w-1, formed, their slots trusting one key,
// the init node's record and Lease in place, and a stick of 1.3.0 signed
// with that key put into cp-1, which published it and, first in the
// rollout, installed it and rebooted.
func rolloutCluster(t *testing.T) (c *fakeCluster, cp, w *rolloutNode) {
	t.Helper()
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	c = newFakeCluster()
	cp = newRolloutNode(t, c, "cp-1", pub)
	w = newRolloutNode(t, c, "w-1", pub)
	cp.peers(w)
	w.peers(cp)
	c.applyUpgradesManifest()
	cp.e.upgradeStick(key, "/stick", "1.3.0")
	cp.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	cp.e.runWatching(t, cp.o, func() bool { return cp.e.rebootCount() == 1 })
	return c, cp, w
}

// One stick in a control plane upgrades the cluster: published there,
// then each node in turn (control plane first) drained, fetched from its
// peer, installed, rebooted into its trial, and once blessed uncordoned
// and done; the worker's disruption budget holds its drain until it
// allows the eviction.
func TestOneStickUpgradesTheCluster(t *testing.T) {
	c, cp, w := rolloutCluster(t)
	assert.Contains(t, cp.e.console.String(), "upgrade: 1.3.0 is rolling out to the cluster's 2 nodes, one at a time, control planes first")
	assert.Equal(t, []string{"1.3.0"}, cp.inst.calls())
	assert.Equal(t, rollout.NodeTrial, c.phaseOf(t, "cp-1"))
	assert.Equal(t, rollout.NodeWaiting, c.phaseOf(t, "w-1"))
	assert.True(t, c.cordoned["cp-1"])
	assert.Equal(t, "cp-1", c.lockHolder(t), "kept across the reboot")

	// The worker waits while the control plane is on trial.
	w.e.runWatching(t, w.o, func() bool { s := w.e.statusIfAny(); return s != nil && s.Upgrade != "" })
	assert.Empty(t, w.inst.calls())
	assert.Equal(t, "1.3.0: rolling, 0 of 2 nodes done, cp-1 trial", w.e.status().Upgrade)

	// cp-1's trial boot is healthy: blessed, committed, uncordoned, done.
	cp.e.media.remove(layout.LabelUpgradeFAT)
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeDone })
	assert.Equal(t, nodestate.UpgradeCommitted, cp.e.journal().Upgrade.State)
	assert.False(t, c.cordoned["cp-1"])
	assert.Empty(t, c.lockHolder(t), "released")

	// The worker's turn: drained (its budget refuses twice), the upgrade
	// fetched from cp-1's registry, installed, rebooted into.
	w.e.console.Reset()
	w.e.runWatching(t, w.o, func() bool { return w.e.rebootCount() == 1 })
	assert.Equal(t, []string{"1.3.0"}, w.inst.calls())
	assert.Contains(t, w.e.console.String(), "draining node w-1: waiting for default/web-1 (its disruption budget allows no eviction now)")
	assert.Contains(t, w.e.console.String(), "rollout: fetching 1.3.0 from the cluster's registries")
	fetched, err := os.ReadFile(w.e.path(layout.UpgradesDir + "/index.json"))
	require.NoError(t, err)
	assert.Contains(t, string(fetched), `"org.opencontainers.image.ref.name":"1.3.0"`)
	assert.Equal(t, []kubeclient.Pod{{Namespace: "kube-flannel", Name: "flannel-w", DaemonSet: true, Phase: "Running"}}, c.pods["w-1"])
	assert.Equal(t, rollout.NodeTrial, c.phaseOf(t, "w-1"))

	w.trialBoot("1.3.0", "44444444-4444-4444-4444-444444444444")
	w.e.runWatching(t, w.o, func() bool { return c.phaseOf(t, "w-1") == rollout.NodeDone })
	r := c.record(t)
	assert.Equal(t, rollout.Done, r.Rollout.Phase)
	assert.Equal(t, "1.3.0: done, 2 of 2 nodes done", r.Summary())
	assert.Equal(t, []string{"cp-1=true", "cp-1=false", "w-1=true", "w-1=false"}, c.cordons)
}

// A node whose trial fails falls back, reports the upgrade rolled back:
// the cluster marks it bad and stops the rollout, the other node never
// installs it, and a stick of it is refused anywhere in the cluster.
func TestRollbackStopsTheRolloutAndMarksItBad(t *testing.T) {
	c, cp, w := rolloutCluster(t)
	cp.e.media.remove(layout.LabelUpgradeFAT)

	// The trial boot fails its health check three times; the boot loader
	// falls back to slot a.
	failTrial(t, cp.e)
	cp.e.setBootID("55555555-5555-5555-5555-555555555555")
	cp.e.console.Reset()
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeRolledBack })
	r := c.record(t)
	assert.Equal(t, rollout.Stopped, r.Rollout.Phase)
	bad := r.BadUpgrade(r.Rollout.Digest)
	require.NotNil(t, bad)
	assert.Equal(t, "cp-1", bad.Node)
	assert.Contains(t, bad.Reason, "injected fault")
	assert.False(t, c.cordoned["cp-1"], "back in service")
	assert.Empty(t, c.lockHolder(t))

	// The worker does nothing; a stick of the same file in it is refused
	// by the cluster's mark before anything is written.
	w.e.upgradeStickSame(t, cp.e, "/stick", "/wstick")
	w.e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/wstick")
	w.e.runWatching(t, w.o, stepsSay(w.e, "upgrade=refused"))
	assert.Contains(t, w.e.console.String(), "rolled back in this cluster and is not installed again on its own: 1.3.0 rolled back on cp-1")
	assert.Empty(t, w.inst.calls())
	assert.Equal(t, rollout.NodeWaiting, c.phaseOf(t, "w-1"))

	// Forced on the control plane (`firstboot upgrade --force`): the mark
	// is cleared, the rollout starts again and the control plane installs
	// it again despite its own rollback of it, which it does not report a
	// second time.
	cp.e.upgradeStickSame(t, cp.e, "/stick", "/home/admin")
	o := cp.o
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	var out strings.Builder
	res, err := RequestUpgrade(ctx, UpgradeOptions{Host: o.Host, Out: &out, Path: "/home/admin/terrarium-1.3.0.upgrade", Force: true,
		Wait: 10 * time.Second, Poll: time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, outcomePublished, res.Outcome)
	require.Eventually(t, func() bool { return cp.e.rebootCount() == 2 }, 10*time.Second, time.Millisecond, "installed again, forced")
	cancel()
	require.NoError(t, <-done)
	r = c.record(t)
	assert.Nil(t, r.BadUpgrade(r.Rollout.Digest), "forcing cleared the mark, and the old rollback was not reported again")
	assert.True(t, r.Rollout.Forced)
	assert.Equal(t, rollout.Rolling, r.Rollout.Phase)
	assert.Equal(t, rollout.NodeTrial, c.phaseOf(t, "cp-1"))
	assert.Equal(t, []string{"1.3.0", "1.3.0"}, cp.inst.calls())
}

// failTrial records a failed health check of the upgrade's trial boot
// in slot b, as the new slot's firstboot would.
func failTrial(t *testing.T, e *env) {
	t.Helper()
	store, err := nodestate.Open(e.path(journalPath()))
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

func TestUpgradeStatusDrawsTheRollout(t *testing.T) {
	c := newFakeCluster()
	e, _ := clusterEnv(t, "")
	require.NoError(t, e.run(clusterConfig(t, "cp-1")), e.console.String())
	api := &nodeAPI{c: c, node: "cp-1"}
	api.save(kubeclient.ConfigMap{Namespace: rollout.Namespace, Name: rollout.ConfigMapName})
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	_, err := rollout.Update(context.Background(), api, func(r *rollout.Record) error {
		if err := r.Start(rollout.Upgrade{Digest: "sha256:aa", Version: "1.3.0", Kubernetes: "v1.36.3", Ref: "x@sha256:bb"},
			[]rollout.Member{{Name: "cp-1", ControlPlane: true}, {Name: "w-1"}}, "cp-1", at, false); err != nil {
			return err
		}
		r.Bad = append(r.Bad, rollout.Bad{Digest: "sha256:cc", Version: "1.2.9", Node: "w-1", Reason: "kubelet failed", At: at})
		if err := r.Set("sha256:aa", "cp-1", rollout.NodeDone, "runs 1.3.0, blessed", at.Add(time.Minute)); err != nil {
			return err
		}
		return r.Set("sha256:aa", "w-1", rollout.NodeDraining, "", at.Add(2*time.Minute))
	})
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, UpgradeStatus(context.Background(), UpgradeStatusOptions{Host: e.host(), API: c.as("cp-1"), Out: &out}))
	assert.Equal(t, `this node  terrarium 1.2.3
rollout    1.3.0 (Kubernetes v1.36.3), started by cp-1 at 2026-11-26T10:00:00Z: rolling
           [████████████░░░░░░░░░░░░] 1 of 2 nodes done
           NODE  ROLE           PHASE       SINCE                 DETAIL
           cp-1  control plane  done        2026-11-26T10:01:00Z  runs 1.3.0, blessed
           w-1   worker         draining ◀  2026-11-26T10:02:00Z  
bad        1.2.9 rolled back on w-1 at 2026-11-26T10:00:00Z: kubelet failed (not installed again on its own; --force)
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
	c.applyUpgradesManifest()
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
