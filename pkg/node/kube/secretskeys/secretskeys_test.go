package secretskeys

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// api is the cluster: its Nodes, the record with a resource version, and
// how often every Secret was rewritten (and with which keys the control
// planes' kube-apiservers wrote at that moment).
type api struct {
	mu        sync.Mutex
	nodes     []string
	cm        *kubeclient.ConfigMap
	rv        int
	rewrites  int
	failWrite error
	// writers, when set, says which key each kube-apiserver writes with.
	writers func() map[string]string
	// rewrittenWith are the writers at each rewrite.
	rewrittenWith []map[string]string
}

func (a *api) Nodes(context.Context) ([]kubeclient.Node, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []kubeclient.Node
	for _, n := range a.nodes {
		out = append(out, kubeclient.Node{Name: n, ControlPlane: true})
	}
	return append(out, kubeclient.Node{Name: "w-1", Addresses: []kubeclient.NodeAddress{{Type: "InternalIP", Address: "10.0.0.20"}}}), nil
}

func (a *api) ConfigMap(context.Context, string, string) (kubeclient.ConfigMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cm == nil {
		return kubeclient.ConfigMap{}, fmt.Errorf("read: %w", kubeclient.ErrNotFound)
	}
	m := *a.cm
	m.Data = maps.Clone(m.Data)
	return m, nil
}

func (a *api) CreateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cm != nil {
		return kubeclient.ConfigMap{}, kubeclient.ErrConflict
	}
	a.rv++
	m.ResourceVersion = strconv.Itoa(a.rv)
	m.Data = maps.Clone(m.Data)
	a.cm = &m
	return m, nil
}

func (a *api) UpdateConfigMap(_ context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cm == nil || a.cm.ResourceVersion != m.ResourceVersion {
		return kubeclient.ConfigMap{}, fmt.Errorf("update: %w", kubeclient.ErrConflict)
	}
	a.rv++
	m.ResourceVersion = strconv.Itoa(a.rv)
	m.Data = maps.Clone(m.Data)
	a.cm = &m
	return m, nil
}

func (a *api) RewriteSecrets(_ context.Context, progress func(int)) (int, error) {
	if a.failWrite != nil {
		err := a.failWrite
		a.failWrite = nil
		return 0, err
	}
	a.rewrites++
	if a.writers != nil {
		a.rewrittenWith = append(a.rewrittenWith, a.writers())
	}
	progress(12)
	return 12, nil
}

func (a *api) record() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cm == nil {
		return nil
	}
	return maps.Clone(a.cm.Data)
}

// runtime is one control plane's containerd: kube-apiserver, and the
// encryption configuration it read when it was last (re)started.
type runtime struct {
	root    string
	created time.Time
	loaded  string
	stops   int
	down    bool
}

func (r *runtime) Created(context.Context, string) (time.Time, error) {
	if r.down {
		return time.Time{}, nil
	}
	return r.created, nil
}

// Stop: the kubelet starts kube-apiserver again at once, which reads
// the file.
func (r *runtime) Stop(context.Context, string, time.Duration) error {
	r.stops++
	r.start()
	return nil
}

func (r *runtime) start() {
	b, _ := os.ReadFile(filepath.Join(r.root, layout.EncryptionConfigFile))
	r.loaded, r.created, r.down = string(b), time.Now(), false
}

type local struct{ err error }

func (l *local) Version(context.Context) (string, error) { return "v1.36.0", l.err }

// node is a control plane: its config, root, runtime and rotator.
type node struct {
	name string
	c    *machineconfig.Cluster
	rt   *runtime
	loc  *local
	rot  *Rotator
	said []string
}

func newNode(t *testing.T, a *api, name string, c *machineconfig.Cluster) *node {
	t.Helper()
	n := &node{name: name, c: c, loc: &local{}}
	root := t.TempDir()
	n.rt = &runtime{root: root}
	n.rot = &Rotator{Node: name, Root: root, API: a, Local: n.loc, Runtime: n.rt,
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Report: func(r step.Result, d string) { n.said = append(n.said, string(r)+": "+d) }}
	// The boot: the phase writes the file (a stage kept, a new node's
	// write, else prepare), then kube-apiserver starts and reads it.
	n.boot(t)
	return n
}

// boot writes the file as firstboot's phase does and starts
// kube-apiserver.
func (n *node) boot(t *testing.T) {
	t.Helper()
	p := filepath.Join(n.rt.root, layout.EncryptionConfigFile)
	got, err := os.ReadFile(p)
	if _, ok := kubeadmconfig.EncryptionStageOf(n.c, got); err != nil || !ok {
		st := kubeadmconfig.EncryptionPrepare
		if err != nil {
			st = kubeadmconfig.EncryptionWrite // a new node
		}
		want, err := kubeadmconfig.EncryptionConfig(n.c, st)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, want, 0o600))
	}
	n.rt.start()
}

// keys are the key names of an EncryptionConfiguration, the one written
// with first.
func keys(cfg string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`name: (key-[0-9a-f]+)`).FindAllStringSubmatch(cfg, -1) {
		out = append(out, m[1])
	}
	return out
}

func name(t *testing.T, k string) string {
	t.Helper()
	n, err := kubeadmconfig.EncryptionKeyName(k)
	require.NoError(t, err)
	return n
}

func key(b byte) string { return base64.StdEncoding.EncodeToString(slices.Repeat([]byte{b}, 32)) }

// safe: no running kube-apiserver writes with a key another running one
// cannot read.
func safe(t *testing.T, nodes []*node) {
	t.Helper()
	for _, w := range nodes {
		if w.rt.down {
			continue
		}
		wk := keys(w.rt.loaded)[0]
		for _, r := range nodes {
			if !r.rt.down {
				assert.Contains(t, keys(r.rt.loaded), wk, "%s writes with %s, which %s cannot read", w.name, wk, r.name)
			}
		}
	}
}

// run passes each node in turn until none changes anything, checking
// safety after every pass, and returns each node's stage.
func run(t *testing.T, nodes []*node, a *api) map[string]kubeadmconfig.EncryptionStage {
	t.Helper()
	stages := map[string]kubeadmconfig.EncryptionStage{}
	state := func() string {
		s := fmt.Sprint(a.record(), a.rewrites)
		for _, n := range nodes {
			s += fmt.Sprint(n.rt.loaded, n.rt.created, n.rt.down)
		}
		return s
	}
	for range 30 {
		before := state()
		for _, n := range nodes {
			res, err := n.rot.Pass(context.Background(), n.c)
			require.NoError(t, err, n.name)
			stages[n.name] = res.Stage
			safe(t, nodes)
		}
		if state() == before {
			return stages
		}
	}
	t.Fatal("the rotation did not settle in 20 rounds")
	return nil
}

func controlPlane(current string, retired ...string) *machineconfig.Cluster {
	return &machineconfig.Cluster{Role: machineconfig.RoleControlPlane, SecretsEncryptionKey: current, RetiredSecretsEncryptionKeys: retired}
}

// A new cluster with one key: the record is made, the Secrets rewritten
// once (those stored before, in plain text, get encrypted), nothing
// restarted; a second run changes nothing.
func TestOneKey(t *testing.T) {
	a := &api{nodes: []string{"cp-1"}}
	n := newNode(t, a, "cp-1", controlPlane(key(1)))
	stages := run(t, []*node{n}, a)
	assert.Equal(t, kubeadmconfig.EncryptionDone, stages["cp-1"])
	k := name(t, key(1))
	assert.Equal(t, map[string]string{"key": k, "reads.cp-1": k, "writes.cp-1": k, "rewritten": k}, a.record())
	assert.Equal(t, 1, a.rewrites)
	assert.Zero(t, n.rt.stops, "one key: the file never changes, kube-apiserver never restarts")
	assert.Contains(t, n.said, "done: every Secret is written with "+k)
	run(t, []*node{n}, a)
	assert.Equal(t, 1, a.rewrites, "rewritten once")
	res, err := n.rot.Pass(context.Background(), n.c)
	require.NoError(t, err)
	assert.Equal(t, Result{Stage: kubeadmconfig.EncryptionDone, Settled: true}, res)
}

// Two control planes rotate: the first given the new config reads the new
// key and writes with the old until the second reads it too; both then
// write with it; the Secrets are rewritten once both do; then the old
// key goes. At no moment does one write with a key the other cannot
// read.
func TestRotationAcrossTwoControlPlanes(t *testing.T) {
	a := &api{nodes: []string{"cp-1", "cp-2"}}
	old, next := key(1), key(2)
	cp1 := newNode(t, a, "cp-1", controlPlane(old))
	cp2 := newNode(t, a, "cp-2", controlPlane(old))
	nodes := []*node{cp1, cp2}
	a.writers = func() map[string]string {
		return map[string]string{"cp-1": keys(cp1.rt.loaded)[0], "cp-2": keys(cp2.rt.loaded)[0]}
	}
	run(t, nodes, a)
	require.Equal(t, 1, a.rewrites)

	// cp-1's signed change: the new key, the old one retired.
	cp1.c = controlPlane(next, old)
	cp1.boot(t) // the change's phases write prepare; kube-apiserver restarts later
	stages := run(t, nodes, a)
	assert.Equal(t, kubeadmconfig.EncryptionPrepare, stages["cp-1"])
	assert.Equal(t, []string{name(t, old), name(t, next)}, keys(cp1.rt.loaded), "cp-1 writes with the old key, reads both")
	assert.Equal(t, 1, a.rewrites, "nothing rewritten while cp-2 lacks the key")
	assert.Contains(t, cp2.said[len(cp2.said)-1], "the cluster's Secrets move to "+name(t, next)+", which this control plane's config does not hold")
	assert.Contains(t, cp1.said[len(cp1.said)-1], "not yet: cp-2")

	// cp-2's signed change.
	cp2.c = controlPlane(next, old)
	stages = run(t, nodes, a)
	assert.Equal(t, map[string]kubeadmconfig.EncryptionStage{"cp-1": kubeadmconfig.EncryptionDone, "cp-2": kubeadmconfig.EncryptionDone}, stages)
	for _, n := range nodes {
		assert.Equal(t, []string{name(t, next)}, keys(n.rt.loaded), "%s reads and writes with the new key alone", n.name)
	}
	require.Equal(t, 2, a.rewrites)
	assert.Equal(t, map[string]string{"cp-1": name(t, next), "cp-2": name(t, next)}, a.rewrittenWith[1], "the Secrets were rewritten once both wrote with the new key")
	assert.Contains(t, cp1.said[len(cp1.said)-1], "kube-apiserver no longer reads the retired keys "+name(t, old))
}

// A power cut at any look: a node that starts again with no memory (a
// new Rotator, kube-apiserver restarted from the file on disk) and a
// rewrite that fails once end at the same place.
func TestRotationResumesAfterPowerCuts(t *testing.T) {
	old, next := key(1), key(2)
	for cut := 1; cut <= 8; cut++ {
		t.Run(fmt.Sprintf("cut after look %d", cut), func(t *testing.T) {
			a := &api{nodes: []string{"cp-1"}}
			n := newNode(t, a, "cp-1", controlPlane(old))
			run(t, []*node{n}, a)
			n.c = controlPlane(next, old)
			n.boot(t)
			a.failWrite = errors.New("etcdserver: request timed out")
			failed := false
			for look := 1; look <= cut; look++ {
				if _, err := n.rot.Pass(context.Background(), n.c); err != nil {
					assert.ErrorContains(t, err, "request timed out")
					failed = true
				}
			}
			// The cut: a new process, kube-apiserver started from disk.
			n.rot = &Rotator{Node: "cp-1", Root: n.rt.root, API: a, Local: n.loc, Runtime: n.rt, Log: n.rot.Log, Report: n.rot.Report}
			n.rt.down = true
			failWrite := a.failWrite
			a.failWrite = nil
			_, err := n.rot.Pass(context.Background(), n.c)
			require.NoError(t, err)
			n.boot(t)
			stages := run(t, []*node{n}, a)
			assert.Equal(t, kubeadmconfig.EncryptionDone, stages["cp-1"])
			assert.Equal(t, []string{name(t, next)}, keys(n.rt.loaded))
			assert.Equal(t, name(t, next), a.record()["rewritten"])
			if failWrite == nil {
				assert.True(t, failed, "the failing rewrite was tried, and said so")
			}
		})
	}
}

// A control plane that joins after a rotation wrote with whatever its
// boot gave it: the others read every key again and the Secrets are
// rewritten once more.
func TestJoinAfterRotation(t *testing.T) {
	old, next := key(1), key(2)
	a := &api{nodes: []string{"cp-1"}}
	cp1 := newNode(t, a, "cp-1", controlPlane(next, old))
	run(t, []*node{cp1}, a)
	require.Equal(t, 1, a.rewrites)
	a.nodes = append(a.nodes, "cp-2")
	cp2 := newNode(t, a, "cp-2", controlPlane(next, old))
	stages := run(t, []*node{cp1, cp2}, a)
	assert.Equal(t, 2, a.rewrites, "rewritten again once cp-2 wrote with the key")
	assert.Equal(t, kubeadmconfig.EncryptionDone, stages["cp-1"])
	assert.Equal(t, kubeadmconfig.EncryptionDone, stages["cp-2"])
	assert.Equal(t, []string{name(t, next)}, keys(cp2.rt.loaded))
}

// While kube-apiserver is down or starting nothing is recorded; workers
// and control planes without a key do nothing.
func TestWaitsAndNoOps(t *testing.T) {
	a := &api{nodes: []string{"cp-1"}}
	n := newNode(t, a, "cp-1", controlPlane(key(1)))
	n.rt.down = true
	_, err := n.rot.Pass(context.Background(), n.c)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"key": name(t, key(1))}, a.record())
	assert.Equal(t, []string{"waiting: kube-apiserver is not running"}, n.said)
	n.rt.start()
	n.loc.err = errors.New("connection refused")
	_, err = n.rot.Pass(context.Background(), n.c)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"key": name(t, key(1))}, a.record(), "nothing recorded before kube-apiserver answers")

	for _, c := range []*machineconfig.Cluster{nil, {Role: machineconfig.RoleWorker}, {Role: machineconfig.RoleControlPlane}} {
		b := &api{}
		r := &Rotator{Node: "x", Root: t.TempDir(), API: b, Runtime: &runtime{}, Local: &local{}}
		_, err := r.Pass(context.Background(), c)
		require.NoError(t, err)
		assert.Nil(t, b.record())
	}
}
