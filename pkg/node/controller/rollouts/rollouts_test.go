package rollouts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller/controllertest"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// fakeAPI is kube-system's ConfigMaps and the node's cordon, with no
// rights checked (pkg/node/firstboot's tests hold the cluster's RBAC).
type fakeAPI struct {
	mu       sync.Mutex
	cms      map[string]kubeclient.ConfigMap
	version  int
	reads    int
	cordoned map[string]bool
	cordons  []string
	// down, when set, is every read's error: the API out of reach.
	down error
}

var _ API = (*fakeAPI)(nil)

func newFakeAPI() *fakeAPI {
	return &fakeAPI{cms: map[string]kubeclient.ConfigMap{}, cordoned: map[string]bool{}}
}

func (a *fakeAPI) ConfigMap(_ context.Context, namespace, name string) (kubeclient.ConfigMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reads++
	if a.down != nil {
		return kubeclient.ConfigMap{}, a.down
	}
	m, ok := a.cms[namespace+"/"+name]
	if !ok {
		return kubeclient.ConfigMap{}, fmt.Errorf("configmap %s/%s: %w", namespace, name, kubeclient.ErrNotFound)
	}
	return m, nil
}

func (a *fakeAPI) CreateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.cms[m.Namespace+"/"+m.Name]; ok {
		return kubeclient.ConfigMap{}, fmt.Errorf("configmap %s exists: %w", m.Name, kubeclient.ErrConflict)
	}
	return a.save(m), nil
}

func (a *fakeAPI) UpdateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cms[m.Namespace+"/"+m.Name].ResourceVersion != m.ResourceVersion {
		return kubeclient.ConfigMap{}, fmt.Errorf("configmap %s changed: %w", m.Name, kubeclient.ErrConflict)
	}
	return a.save(m), nil
}

// save stores m at a new version; a.mu is held.
func (a *fakeAPI) save(m kubeclient.ConfigMap) kubeclient.ConfigMap {
	a.version++
	m.ResourceVersion = fmt.Sprint(a.version)
	a.cms[m.Namespace+"/"+m.Name] = m
	return m
}

func (a *fakeAPI) Cordon(_ context.Context, name string, unschedulable bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cordoned[name] = unschedulable
	verb := "uncordon "
	if unschedulable {
		verb = "cordon "
	}
	a.cordons = append(a.cordons, verb+name)
	return nil
}

func (a *fakeAPI) PodsOn(context.Context, string) ([]kubeclient.Pod, error) { return nil, nil }

func (a *fakeAPI) Evict(context.Context, kubeclient.Pod) error { return nil }

func (a *fakeAPI) readCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reads
}

func (a *fakeAPI) cordonLog() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.cordons...)
}

func (a *fakeAPI) isCordoned(node string) (cordoned, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cordoned, known = a.cordoned[node]
	return cordoned, known
}

// fakeNode is the node's side: it records installs, arms, runs in place
// and reboots.
type fakeNode struct {
	controllertest.Reporter
	installs, arms, applies, reboots int
	// staged is what Stage answers (refused by default); an arm of a
	// staged upgrade answers armed.
	staged, armed nodestate.UpgradeResult
	// inPlace and why are what InPlace answers, applyErr ApplyInPlace.
	inPlace     bool
	why         string
	applyErr    error
	runsInPlace string
	rebootAt    time.Time // what RebootAsked answers
}

var _ Node = (*fakeNode)(nil)

func (*fakeNode) UpgradeKeys(*machineconfig.Config) []signature.PublicKey { return nil }

func (n *fakeNode) Stage(context.Context, *machineconfig.Config, File, string, string, upgrade.Policy, bool) (func(context.Context) nodestate.UpgradeResult, nodestate.UpgradeResult) {
	n.installs++
	if n.staged.Outcome == nodestate.OutcomeStaged {
		return func(context.Context) nodestate.UpgradeResult { n.arms++; return n.armed }, n.staged
	}
	if n.staged.Outcome != "" {
		return nil, n.staged
	}
	return nil, nodestate.UpgradeResult{Outcome: nodestate.OutcomeRefused, Detail: "the fake installs nothing"}
}

func (n *fakeNode) InPlace(nodestate.UpgradeResult) (bool, string) { return n.inPlace, n.why }

func (n *fakeNode) RunsInPlace() string { return n.runsInPlace }

func (n *fakeNode) ApplyInPlace(context.Context, *machineconfig.Config) error {
	n.applies++
	return n.applyErr
}

func (n *fakeNode) Reboot(context.Context) { n.reboots++ }

func (n *fakeNode) RebootAsked() time.Time { return n.rebootAt }

// lock is a change lock that tells whether it was held and let go.
type lock struct {
	held []string
	out  int
}

func (l *lock) Hold(what string) { l.held = append(l.held, what); l.out++ }
func (l *lock) Unlock()          { l.out-- }

type env struct {
	c     *Controller
	api   *fakeAPI
	node  *fakeNode
	lock  *lock
	now   time.Time
	cfg   *machineconfig.Config
	peers error
}

// newEnv is worker w-1 of a cluster, running 1.2.3, with its status
// object (which a control plane applies) in place.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{api: newFakeAPI(), node: &fakeNode{}, lock: &lock{}, now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		cfg:   &machineconfig.Config{Hostname: "w-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleWorker}},
		peers: errors.New("no peer answers")}
	h := &host.Host{Root: t.TempDir(), Clock: host.ClockFunc(func() time.Time { return e.now })}
	journal, err := nodestate.On(h).OpenJournal()
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	e.c = &Controller{
		Options: Options{
			API:      func() (API, error) { return e.api, nil },
			Peers:    func() (upgradeshare.Peers, error) { return nil, e.peers },
			ShareDir: layout.UpgradesDir, Poll: 5 * time.Second,
		},
		Node: e.node, Host: h, Log: log, Journal: journal,
		Status:  status.NewPublisher(h.Path(status.File), io.Discard, log, status.Status{}),
		Changes: e.lock, Config: func() *machineconfig.Config { return e.cfg },
		Version: "1.2.3", Slot: layout.SlotA,
	}
	_, err = e.api.CreateConfigMap(context.Background(), kubeclient.ConfigMap{Namespace: rollout.Namespace, Name: rollout.StatusName("w-1")})
	require.NoError(t, err)
	return e
}

// roll writes a record rolling version out to cp-1 (done) and w-1,
// whose turn it is, with in as its instructions (nil: a record of a
// release before signed rollouts).
func (e *env) roll(t *testing.T, version string, in *rollout.Instructions) {
	t.Helper()
	_, err := rollout.Update(context.Background(), e.api, func(r *rollout.Record) error {
		u := rollout.Upgrade{Digest: "sha256:" + fmt.Sprintf("%064x", 1), Version: version, Ref: "upgrades/terrarium@sha256:" + fmt.Sprintf("%064x", 2)}
		if in != nil {
			u.Instructions = *in
			u.Instructions.Digest = u.Digest
		}
		if err := r.Start(u, []rollout.Member{{Name: "cp-1", ControlPlane: true}, {Name: "w-1"}}, "cp-1", e.now); err != nil {
			return err
		}
		r.Rollout.Nodes[0].Phase = rollout.NodeDone
		return nil
	})
	require.NoError(t, err)
}

func (e *env) status(t *testing.T) rollout.Status {
	t.Helper()
	s, err := rollout.LoadStatus(context.Background(), e.api, "w-1")
	require.NoError(t, err)
	return s
}

func TestNoPartWithoutACluster(t *testing.T) {
	for name, tweak := range map[string]func(e *env){
		"a standalone node":   func(e *env) { e.cfg.Cluster = nil },
		"no API to take part": func(e *env) { e.c.Options.API = nil },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			tweak(e)
			before := e.api.readCount()
			require.NoError(t, e.c.Reconcile(context.Background()))
			assert.Equal(t, before, e.api.readCount(), "the API is not asked")
			assert.False(t, e.c.InRollout(e.cfg))
		})
	}
}

func TestLooksAtMostEveryPoll(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, e.c.Reconcile(ctx))
	first := e.api.readCount()
	require.Positive(t, first)
	e.now = e.now.Add(e.c.Options.Poll - time.Second)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, first, e.api.readCount(), "a look before Poll has passed reads nothing")
	e.now = e.now.Add(time.Second)
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Greater(t, e.api.readCount(), first)
	assert.Equal(t, "1.2.3", e.status(t).Version, "the node reports what it runs")
}

// A node whose turn ended done looks again at once, not a poll later: a
// control plane passes the turn on in the record at its next look.
func TestLooksAgainAtOnceAfterItsTurn(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.2.3", nil)
	require.NoError(t, e.c.Reconcile(context.Background()))
	require.Equal(t, rollout.NodeDone, e.status(t).Phase)
	reads := e.api.readCount()
	require.NoError(t, e.c.Reconcile(context.Background()))
	assert.Greater(t, e.api.readCount(), reads, "read again with no time passed")
}

func TestUnverifiedTurnIsRefusedWithNothingDone(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.3.0", &rollout.Instructions{Manifest: "not a manifest", ManifestSignature: "x"})
	require.NoError(t, e.c.Reconcile(context.Background()))

	s := e.status(t)
	assert.Equal(t, rollout.NodeFailed, s.Phase)
	assert.Contains(t, s.Detail, "refused: "+rollout.ErrUnverified.Error())
	assert.Zero(t, e.node.installs)
	_, touched := e.api.isCordoned("w-1")
	assert.False(t, touched, "not drained")
	assert.Empty(t, e.lock.held, "nothing to lock for a turn not taken")
	assert.Contains(t, e.node.Console(), "rollout of 1.3.0 refused on this node, nothing was done")
}

func TestTurnOfAnUpgradeRolledBackHereIsRefused(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.c.Journal.Update(func(j *nodestate.Journal) {
		j.BadUpgrades = append(j.BadUpgrades, nodestate.BadUpgrade{Digest: "sha256:" + fmt.Sprintf("%064x", 1), Version: "1.3.0", Reason: "health failed", At: e.now})
	}))
	e.roll(t, "1.3.0", nil)
	require.NoError(t, e.c.Reconcile(context.Background()))

	s := e.status(t)
	assert.Equal(t, rollout.NodeFailed, s.Phase)
	assert.Contains(t, s.Detail, ErrRolledBackBefore.Error()+": 1.3.0 rolled back at 2026-03-01T12:00:00Z (health failed)")
	assert.Zero(t, e.node.installs)
}

func TestTurnOnTheVersionItRunsIsDone(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.2.3", nil)
	require.NoError(t, e.c.Reconcile(context.Background()))

	s := e.status(t)
	assert.Equal(t, rollout.NodeDone, s.Phase)
	assert.Equal(t, "runs 1.2.3 already", s.Detail)
	cordoned, known := e.api.isCordoned("w-1")
	assert.True(t, known && !cordoned, "schedulable")
	assert.Equal(t, []string{"rollout=done: runs 1.2.3 already"}, e.node.Steps())
}

func TestFailedFetchEndsTheTurnUntouched(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.3.0", nil)
	require.NoError(t, e.c.Reconcile(context.Background()))

	s := e.status(t)
	assert.Equal(t, rollout.NodeFailed, s.Phase)
	assert.Equal(t, "fetch: no peer answers", s.Detail)
	assert.Empty(t, e.api.cordonLog(), "fetched before the drain: the node's scheduling untouched")
	assert.Zero(t, e.node.installs)
	assert.Equal(t, []string{"the rollout's turn"}, e.lock.held, "the turn holds the change lock")
	assert.Zero(t, e.lock.out, "and lets it go")
	assert.Equal(t, []string{"rollout=failed: fetch: no peer answers"}, e.node.Steps())
}

// A write that failed on the copy in the node's share drops that copy,
// so that the next try fetches the file again rather than fail alike.
func TestFailedWriteDropsTheSharesCopy(t *testing.T) {
	e := newEnv(t)
	share, art := e.rollStaged(t)
	e.node.staged = nodestate.UpgradeResult{Outcome: nodestate.OutcomeFailed, Detail: "terrarium-1.3.0.upgrade: member vmlinuz: sha256 …, the manifest says …"}
	require.NoError(t, e.c.Reconcile(context.Background()))

	assert.Equal(t, 1, e.node.installs)
	s := e.status(t)
	assert.Equal(t, rollout.NodeFailed, s.Phase)
	assert.Contains(t, s.Detail, "member vmlinuz")
	_, kept := share.Find(art.Manifest)
	assert.False(t, kept, "the copy is dropped")
	assert.Contains(t, e.node.Console(), "rollout: dropped this node's copy of 1.3.0: the next try fetches it again")
}

// TestFailedFetchOfAResumedTurnUncordons: a turn that got to its drain
// before (a firstboot restart, a power cut) left the node cordoned; its
// failure now puts the node back in service.
func TestFailedFetchOfAResumedTurnUncordons(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.3.0", nil)
	ctx := context.Background()
	rec, err := rollout.Load(ctx, e.api)
	require.NoError(t, err)
	_, err = rollout.UpdateStatus(ctx, e.api, "w-1", func(s *rollout.Status) (bool, error) {
		s.Rollout, s.Phase = rec.Rollout.ID(), rollout.NodeDraining
		return true, nil
	})
	require.NoError(t, err)
	require.NoError(t, e.api.Cordon(ctx, "w-1", true))

	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, rollout.NodeFailed, e.status(t).Phase)
	assert.Equal(t, []string{"cordon w-1", "uncordon w-1"}, e.api.cordonLog(), "back in service")
}

func TestPublishNeedsAServingControlPlane(t *testing.T) {
	e := newEnv(t)
	e.c.Options.Admin = func() (AdminAPI, error) { t.Fatal("the API is not opened"); return nil, nil }
	ctx := context.Background()

	_, err := e.c.Publish(ctx, e.cfg, Upgrade{})
	require.ErrorIs(t, err, errWorkerPublish)

	e.cfg.Cluster.Role = machineconfig.RoleControlPlane
	_, err = e.c.Publish(ctx, e.cfg, Upgrade{})
	require.ErrorIs(t, err, errNotServing)
	assert.Contains(t, err.Error(), "registry.serve is off")
}

func TestStaleTurnIsBrokenOnThisControlPlanesClock(t *testing.T) {
	e := newEnv(t)
	e.c.Options.StaleTurn = time.Hour
	e.roll(t, "1.3.0", nil)
	rec, err := rollout.Load(context.Background(), e.api)
	require.NoError(t, err)
	quiet := map[string]rollout.Status{"w-1": {Node: "w-1", Phase: rollout.NodeDraining}}

	assert.False(t, e.c.breakStaleTurn(&rec, quiet, "cp-1", e.now), "first sign seen")
	assert.False(t, e.c.breakStaleTurn(&rec, quiet, "cp-1", e.now.Add(59*time.Minute)))
	moved := map[string]rollout.Status{"w-1": {Node: "w-1", Phase: rollout.NodeInstalling}}
	assert.False(t, e.c.breakStaleTurn(&rec, moved, "cp-1", e.now.Add(61*time.Minute)), "a new sign starts the wait again")
	assert.False(t, e.c.breakStaleTurn(&rec, moved, "cp-1", e.now.Add(120*time.Minute)))
	require.True(t, e.c.breakStaleTurn(&rec, moved, "cp-1", e.now.Add(121*time.Minute)))
	assert.Equal(t, rollout.Stopped, rec.Rollout.Phase)
	assert.Equal(t, "w-1 gave no sign in its turn for 1h0m0s, and control plane cp-1 stopped the rollout (the same stick starts it again)", rec.Rollout.Reason)
}

func TestClusterBadKeepsItsClientUntilTheAPIFails(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	opens := 0
	e.c.Options.API = func() (API, error) { opens++; return e.api, nil }
	digest := "sha256:" + fmt.Sprintf("%064x", 7)
	_, err := rollout.Update(ctx, e.api, func(r *rollout.Record) error {
		r.Bad = append(r.Bad, rollout.Bad{Digest: digest, Version: "1.3.0", Node: "cp-1", Reason: "health failed", At: e.now})
		return nil
	})
	require.NoError(t, err)

	b := e.c.ClusterBad(ctx, e.cfg, digest)
	require.NotNil(t, b, "the record's mark")
	assert.Equal(t, "cp-1", b.Node)
	assert.Nil(t, e.c.ClusterBad(ctx, e.cfg, "sha256:"+fmt.Sprintf("%064x", 8)), "no mark on another upgrade")
	require.NoError(t, e.c.Reconcile(ctx))
	assert.Equal(t, 1, opens, "the checks and the controller's look share one client")

	e.api.mu.Lock()
	e.api.down = errors.New("connection refused")
	e.api.mu.Unlock()
	assert.Nil(t, e.c.ClusterBad(ctx, e.cfg, digest), "an API out of reach marks nothing")
	e.api.mu.Lock()
	e.api.down = nil
	e.api.mu.Unlock()
	assert.NotNil(t, e.c.ClusterBad(ctx, e.cfg, digest))
	assert.Equal(t, 2, opens, "the client is opened again after the API failed")
}

// rollStaged rolls 1.3.0 out to w-1 alone from a file in its share, which
// Stage stages into slot b; it returns the share and the file in it.
func (e *env) rollStaged(t *testing.T) (*upgradeshare.Share, upgradeshare.Artifact) {
	t.Helper()
	share, err := upgradeshare.Open(e.c.Host.Path(layout.UpgradesDir))
	require.NoError(t, err)
	art, err := share.Add(context.Background(), smallUpgrade(t, "1.3.0"))
	require.NoError(t, err)
	_, err = rollout.Update(context.Background(), e.api, func(r *rollout.Record) error {
		u := rollout.Upgrade{Digest: "sha256:" + fmt.Sprintf("%064x", 1), Version: "1.3.0", Ref: "upgrades/terrarium@" + art.Manifest.String()}
		return r.Start(u, []rollout.Member{{Name: "w-1"}}, "cp-1", e.now)
	})
	require.NoError(t, err)
	e.node.staged = nodestate.UpgradeResult{Outcome: nodestate.OutcomeStaged, Version: "1.3.0", Slot: "b"}
	e.node.armed = nodestate.UpgradeResult{Outcome: nodestate.OutcomeInstalled, Version: "1.3.0", Slot: "b"}
	return share, art
}

func TestTurnInPlace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inPlace  bool
		applyErr error
		phase    string
		cordons  []string
		reboots  int
		console  string
	}{{
		name: "only Kubernetes changes", inPlace: true, phase: rollout.NodeDone, cordons: []string{"uncordon w-1"}, // never cordoned
		console: "only Kubernetes changes: kubelet, so this node runs it in place, without a drain or a reboot",
	}, {
		name: "in place fails", inPlace: true, applyErr: errors.New("kubeadm upgrade node: exit status 1"),
		phase: rollout.NodeTrial, cordons: []string{"cordon w-1"}, reboots: 1,
		console: "running 1.3.0 in place failed (kubeadm upgrade node: exit status 1); draining this node and rebooting into slot b instead",
	}, {
		name: "more changes", phase: rollout.NodeTrial, cordons: []string{"cordon w-1"}, reboots: 1,
		console: "rollout: 1.3.0 takes a reboot: /usr/bin/firstboot changes",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.rollStaged(t)
			e.node.inPlace, e.node.applyErr = tc.inPlace, tc.applyErr
			e.node.why = "/usr/bin/firstboot changes"
			if tc.inPlace {
				e.node.why = "only Kubernetes changes: kubelet"
			}
			require.NoError(t, e.c.Reconcile(context.Background()))

			s := e.status(t)
			assert.Equal(t, tc.phase, s.Phase, s.Detail)
			assert.Equal(t, tc.cordons, e.api.cordonLog())
			assert.Equal(t, 1, e.node.arms)
			assert.Equal(t, tc.reboots, e.node.reboots)
			assert.Contains(t, e.node.Console(), tc.console)
			if tc.inPlace {
				assert.Equal(t, 1, e.node.applies)
			} else {
				assert.Zero(t, e.node.applies)
			}
			if tc.phase == rollout.NodeDone {
				assert.Equal(t, "runs 1.3.0's Kubernetes in place; slot b boots it at the next reboot", s.Detail)
			}
		})
	}
}

// TestResumedTurnInPlace: a firstboot that restarted after its arm
// recorded the upgrade to run in place takes it up again, with nothing
// staged or armed twice and the node never drained.
func TestResumedTurnInPlace(t *testing.T) {
	e := newEnv(t)
	e.rollStaged(t)
	require.NoError(t, e.c.Journal.Update(func(j *nodestate.Journal) {
		j.Upgrade = &nodestate.Upgrade{
			Digest: "sha256:" + fmt.Sprintf("%064x", 1), From: "1.2.3", To: "1.3.0", FromSlot: "a", ToSlot: "b",
			State: nodestate.UpgradeInstalled, InstalledAt: e.now, InPlaceAt: e.now,
		}
	}))
	require.NoError(t, e.c.Reconcile(context.Background()))

	assert.Equal(t, rollout.NodeDone, e.status(t).Phase)
	assert.Equal(t, 1, e.node.applies)
	assert.Zero(t, e.node.installs)
	assert.Zero(t, e.node.arms)
	assert.Zero(t, e.node.reboots)
	assert.Equal(t, []string{"uncordon w-1"}, e.api.cordonLog(), "never cordoned")
}

// TestTurnOfANodeRunningInPlaceRebootsFirst: a node that runs the other
// slot's Kubernetes in place writes the next upgrade into no slot before
// it boots that one: drained, rebooted, nothing staged.
func TestTurnOfANodeRunningInPlaceRebootsFirst(t *testing.T) {
	e := newEnv(t)
	e.rollStaged(t)
	e.node.runsInPlace = "b"
	require.NoError(t, e.c.Reconcile(context.Background()))

	assert.Equal(t, 1, e.node.reboots)
	assert.Zero(t, e.node.installs, "nothing written into the slot it runs")
	assert.Equal(t, []string{"cordon w-1"}, e.api.cordonLog())
	s := e.status(t)
	assert.Equal(t, rollout.NodeDraining, s.Phase, "its turn resumes drained after the reboot")
	assert.Equal(t, "rebooting into slot b before the upgrade", s.Detail)
	assert.Contains(t, e.node.Console(), "rollout: this node runs slot b's Kubernetes in place, and 1.3.0 goes into that slot: draining it and rebooting into slot b first")

	// The reboot on its way is not asked for again.
	e.node.rebootAt = e.now
	e.now = e.now.Add(e.c.Options.Poll)
	require.NoError(t, e.c.Reconcile(context.Background()))
	assert.Equal(t, 1, e.node.reboots)
}

// smallUpgrade is a signed upgrade file of version with small parts, its
// signature verified.
func smallUpgrade(t *testing.T, version string) *upgrade.Verified {
	t.Helper()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	dir := t.TempDir()
	var parts []upgrade.Part
	for _, p := range []struct {
		name string
		role upgrade.Role
	}{{"rootfs.squashfs", upgrade.RoleRootfs}, {"vmlinuz", upgrade.RoleKernel}, {"initrd.img", upgrade.RoleInitramfs}} {
		path := filepath.Join(dir, p.name)
		require.NoError(t, os.WriteFile(path, []byte("the bytes of "+p.name), 0o644))
		parts = append(parts, upgrade.FilePart(p.name, p.role, path))
	}
	var buf bytes.Buffer
	_, err := upgrade.Write(t.Context(), &buf, upgrade.Manifest{Version: version, Compatible: "terrarium", MinFromVersion: "1.2.0",
		KubernetesVersion: "v1.36.3", EtcdVersion: "3.6.4", BuiltAt: "2026-01-01T00:00:00Z"}, parts, key)
	require.NoError(t, err)
	f, err := upgrade.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	v, err := f.VerifySignature([]signature.PublicKey{signature.PublicKeyOf(key)})
	require.NoError(t, err)
	return v
}

// ctxAPI is an API that fails every call whose context ended, as a real
// client does.
type ctxAPI struct{ *fakeAPI }

func (a ctxAPI) ConfigMap(ctx context.Context, namespace, name string) (kubeclient.ConfigMap, error) {
	if err := ctx.Err(); err != nil {
		return kubeclient.ConfigMap{}, err
	}
	return a.fakeAPI.ConfigMap(ctx, namespace, name)
}

func (a ctxAPI) UpdateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	if err := ctx.Err(); err != nil {
		return kubeclient.ConfigMap{}, err
	}
	return a.fakeAPI.UpdateConfigMap(ctx, m)
}

// TestStopStartedStopsOnlyItsOwnRollout: the rollout a Publish started
// before its copy failed is stopped by its ID, even once the Publish's
// context ended (firstboot stopped); another rollout of the same upgrade
// is not.
func TestStopStartedStopsOnlyItsOwnRollout(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.3.0", nil)
	rec, err := rollout.Load(context.Background(), e.api)
	require.NoError(t, err)
	id := rec.Rollout.ID()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	u := Upgrade{Digest: rec.Rollout.Digest, Manifest: upgrade.Manifest{Version: "1.3.0"}}

	e.c.stopStarted(ctx, ctxAPI{e.api}, u, "another rollout of it", errors.New("part rootfs.squashfs differs"))
	rec, err = rollout.Load(context.Background(), e.api)
	require.NoError(t, err)
	assert.Equal(t, rollout.Rolling, rec.Rollout.Phase, "not the one it started")

	e.c.stopStarted(ctx, ctxAPI{e.api}, u, id, errors.New("part rootfs.squashfs differs"))
	rec, err = rollout.Load(context.Background(), e.api)
	require.NoError(t, err)
	assert.Equal(t, rollout.Stopped, rec.Rollout.Phase)
	assert.Equal(t, "the copy of 1.3.0 from the stick failed: part rootfs.squashfs differs (insert a good copy of it)", rec.Rollout.Reason)
	assert.NotContains(t, e.node.Console(), "stopping it failed too")
}

// TestRollingOutCopiesAgainWhatThisNodeStartedAndLacks: the stick of a
// rollout this control plane started, whose copy into its share was cut
// short (a power cut), is not answered "rolls out already": it is copied
// again. Another node's rollout of it is.
func TestRollingOutCopiesAgainWhatThisNodeStartedAndLacks(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.3.0", nil) // started by cp-1
	rec, err := rollout.Load(context.Background(), e.api)
	require.NoError(t, err)
	digest := rec.Rollout.Digest
	ctx := context.Background()

	e.cfg = &machineconfig.Config{Hostname: "cp-2", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleControlPlane}}
	msg, rolling, err := e.c.RollingOut(ctx, e.cfg, digest)
	require.NoError(t, err)
	assert.True(t, rolling, "started by cp-1")
	assert.Contains(t, msg, "1.3.0 rolls out to the cluster already, started by cp-1")

	e.cfg.Hostname = "cp-1"
	_, rolling, err = e.c.RollingOut(ctx, e.cfg, digest)
	require.NoError(t, err)
	assert.False(t, rolling, "started here, and this node's share lacks it")

	held := newEnv(t)
	held.rollStaged(t) // started by cp-1, whose share holds it
	held.cfg = &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleControlPlane}}
	msg, rolling, err = held.c.RollingOut(ctx, held.cfg, digest)
	require.NoError(t, err)
	assert.True(t, rolling, "started here, and this node's share holds it")
	assert.Contains(t, msg, "1.3.0 rolls out to the cluster already, started by cp-1")
}

// TestTurnWhoseRolloutStoppedWhileItWaitedDoesNothing: a turn that waited
// for the change lock (a Publish's copy) does nothing when the rollout
// stopped meanwhile, and lets the lock go.
func TestTurnWhoseRolloutStoppedWhileItWaitedDoesNothing(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.3.0", nil)
	e.c.Changes = holdThen(e.lock, func() {
		_, err := rollout.Update(context.Background(), e.api, func(r *rollout.Record) error {
			r.Stop("the copy of 1.3.0 from the stick failed")
			return nil
		})
		require.NoError(t, err)
	})
	require.NoError(t, e.c.Reconcile(context.Background()))
	assert.Equal(t, []string{"the rollout's turn"}, e.lock.held)
	assert.Zero(t, e.lock.out, "let go")
	assert.Zero(t, e.node.installs)
	assert.Empty(t, e.api.cordonLog(), "not drained")
	assert.Empty(t, e.node.Steps(), "no turn taken, nor reported")
}

// holdThen is l, which runs then once as the lock is taken: what held it
// before changed something.
func holdThen(l *lock, then func()) Holder { return &thenLock{lock: l, then: then} }

type thenLock struct {
	*lock
	then func()
}

func (l *thenLock) Hold(what string) {
	l.lock.Hold(what)
	if l.then != nil {
		l.then()
		l.then = nil
	}
}

// TestStartGoesOnWithTheRolloutOfTheSameUpgrade: a Publish of the upgrade
// that rolls out already starts nothing; when this node started that
// rollout (its copy of the stick cut short, and copied again), the
// rollout names the new copy. Once stopped, the upgrade starts anew.
func TestStartGoesOnWithTheRolloutOfTheSameUpgrade(t *testing.T) {
	e := newEnv(t)
	e.roll(t, "1.3.0", nil) // started by cp-1
	ctx := context.Background()
	rec, err := rollout.Load(ctx, e.api)
	require.NoError(t, err)
	first, firstRef := rec.Rollout.ID(), rec.Rollout.Ref
	members := []rollout.Member{{Name: "cp-1", ControlPlane: true}, {Name: "w-1"}}
	ru := rollout.Upgrade{Digest: rec.Rollout.Digest, Version: "1.3.0", Ref: "upgrades/terrarium@sha256:" + fmt.Sprintf("%064x", 3)}

	rec, id, err := e.c.start(ctx, e.api, ru, members, "cp-2")
	require.NoError(t, err)
	assert.Empty(t, id, "cp-1's rollout")
	assert.Equal(t, first, rec.Rollout.ID())
	assert.Equal(t, firstRef, rec.Rollout.Ref, "cp-1's copy")

	rec, id, err = e.c.start(ctx, e.api, ru, members, "cp-1")
	require.NoError(t, err)
	assert.Empty(t, id, "not started again")
	assert.Equal(t, first, rec.Rollout.ID())
	assert.Equal(t, ru.Ref, rec.Rollout.Ref, "the copy its share holds now")
	assert.Equal(t, rollout.NodeDone, rec.Rollout.Nodes[0].Phase, "the rollout goes on where it was")

	_, err = rollout.Update(ctx, e.api, func(r *rollout.Record) error { r.Stop("a test"); return nil })
	require.NoError(t, err)
	e.now = e.now.Add(time.Minute)
	rec, id, err = e.c.start(ctx, e.api, ru, members, "cp-1")
	require.NoError(t, err)
	require.NotEmpty(t, id, "started anew")
	assert.Equal(t, rec.Rollout.ID(), id)
	assert.NotEqual(t, first, id)
	assert.Equal(t, rollout.Rolling, rec.Rollout.Phase)
}

// TestNodeDrainedByAStoppedRolloutIsBackInService: a rollout that stopped
// while its turn had the node drained, rebooting or on trial leaves no
// step of that turn to uncordon it; the node does so itself, once its
// trial (if any) ended, and says how the turn ended. An upgrade the turn
// armed is booted first. An operator's later cordon is left alone.
func TestNodeDrainedByAStoppedRolloutIsBackInService(t *testing.T) {
	const (
		stopped   = "stopped"   // the rollout stopped
		restarted = "restarted" // stopped, and the same upgrade rolls out again
		cleared   = "cleared"   // the record holds no rollout
		rolling   = "rolling"   // the rollout still rolls: the turn goes on
	)
	armed := func(state, digest string) *nodestate.Upgrade {
		return &nodestate.Upgrade{Digest: digest, To: "1.3.0", FromSlot: "a", ToSlot: "b", State: state}
	}
	const turnsDigest = "" // filled in with the rollout's
	tests := []struct {
		name string
		// record is what became of the rollout, phase the node's phase
		// in it.
		record, phase string
		// upgrade is its journal's last upgrade, runs the version it runs
		// and slot the slot it booted.
		upgrade  *nodestate.Upgrade
		runs     string
		slot     layout.Slot
		rebootAt time.Duration // since now; 0: none asked

		wantPhase, wantDetail string
		wantCordoned          bool
		wantReboots           int
	}{
		{name: "drained, then stopped", record: stopped, phase: rollout.NodeDraining, runs: "1.2.3", slot: layout.SlotA,
			wantPhase: rollout.NodeFailed, wantDetail: "its rollout stopped while this node was drained; back in service on 1.2.3"},
		{name: "drained, then the record cleared", record: cleared, phase: rollout.NodeDraining, runs: "1.2.3", slot: layout.SlotA,
			wantPhase: rollout.NodeFailed, wantDetail: "its rollout stopped while this node was drained; back in service on 1.2.3"},
		{name: "drained, then the same upgrade rolls out again", record: restarted, phase: rollout.NodeDraining, runs: "1.2.3", slot: layout.SlotA,
			wantPhase: rollout.NodeFailed, wantDetail: "its rollout stopped while this node was drained; back in service on 1.2.3"},
		{name: "its trial blessed after the stop", record: stopped, phase: rollout.NodeTrial, runs: "1.3.0", slot: layout.SlotB,
			upgrade:   armed(nodestate.UpgradeCommitted, turnsDigest),
			wantPhase: rollout.NodeDone, wantDetail: "runs 1.3.0, blessed after its rollout stopped; back in service"},
		{name: "on trial", record: stopped, phase: rollout.NodeTrial, runs: "1.3.0", slot: layout.SlotB,
			upgrade:   armed(nodestate.UpgradeInstalled, turnsDigest),
			wantPhase: rollout.NodeTrial, wantCordoned: true},
		{name: "on trial of another upgrade", record: stopped, phase: rollout.NodeDraining, runs: "1.2.9", slot: layout.SlotB,
			upgrade:   armed(nodestate.UpgradeInstalled, "sha256:"+strings.Repeat("9", 64)),
			wantPhase: rollout.NodeDraining, wantCordoned: true},
		{name: "armed, its reboot just asked", record: stopped, phase: rollout.NodeTrial, runs: "1.2.3", slot: layout.SlotA, rebootAt: -time.Minute,
			upgrade:   armed(nodestate.UpgradeInstalled, turnsDigest),
			wantPhase: rollout.NodeTrial, wantCordoned: true},
		{name: "armed, its reboot never came", record: stopped, phase: rollout.NodeTrial, runs: "1.2.3", slot: layout.SlotA, rebootAt: -time.Hour,
			upgrade:   armed(nodestate.UpgradeInstalled, turnsDigest),
			wantPhase: rollout.NodeTrial, wantCordoned: true, wantReboots: 1},
		{name: "the turn goes on", record: rolling, phase: rollout.NodeDraining, runs: "1.2.3", slot: layout.SlotA,
			wantPhase: rollout.NodeFailed, wantDetail: "fetch: no peer answers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			e.roll(t, "1.3.0", nil)
			rec, err := rollout.Load(ctx, e.api)
			require.NoError(t, err)
			ro := rec.Rollout
			_, err = rollout.UpdateStatus(ctx, e.api, "w-1", func(s *rollout.Status) (bool, error) {
				s.Rollout, s.Digest, s.Upgrade, s.Phase = ro.ID(), ro.Digest, ro.Version, tt.phase
				return true, nil
			})
			require.NoError(t, err)
			require.NoError(t, e.api.Cordon(ctx, "w-1", true))
			if tt.record != rolling {
				_, err = rollout.Update(ctx, e.api, func(r *rollout.Record) error {
					r.Stop("w-1 gave no sign in its turn for 1h0m0s")
					if tt.record == cleared {
						r.Rollout = nil
					}
					return nil
				})
				require.NoError(t, err)
			}
			if tt.record == restarted {
				e.now = e.now.Add(time.Minute)
				e.roll(t, "1.3.0", nil)
			}
			if tt.upgrade != nil {
				u := *tt.upgrade
				if u.Digest == turnsDigest {
					u.Digest = ro.Digest
				}
				require.NoError(t, e.c.Journal.Update(func(j *nodestate.Journal) { j.Upgrade = &u }))
			}
			e.c.Version, e.c.Slot = tt.runs, tt.slot
			if tt.rebootAt != 0 {
				e.node.rebootAt = e.now.Add(tt.rebootAt)
			}

			require.NoError(t, e.c.Reconcile(ctx))
			s := e.status(t)
			assert.Equal(t, tt.wantPhase, s.Phase)
			assert.Equal(t, ro.ID(), s.Rollout, "the status speaks of the turn's rollout")
			assert.Equal(t, tt.wantReboots, e.node.reboots)
			cordoned, _ := e.api.isCordoned("w-1")
			if tt.wantCordoned {
				assert.True(t, cordoned, "left drained until its trial ends")
				assert.Empty(t, e.node.Steps())
				return
			}
			assert.False(t, cordoned, "back in service")
			assert.Equal(t, tt.wantDetail, s.Detail)
			assert.Equal(t, []string{"rollout=" + tt.wantPhase + ": " + tt.wantDetail}, e.node.Steps())

			// An operator cordons the node again: the next look leaves it.
			require.NoError(t, e.api.Cordon(ctx, "w-1", true))
			e.now = e.now.Add(e.c.Options.Poll)
			require.NoError(t, e.c.Reconcile(ctx))
			cordoned, _ = e.api.isCordoned("w-1")
			assert.True(t, cordoned, "an operator's cordon stays")
		})
	}
}
