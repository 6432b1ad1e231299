// Package secretskeys moves a cluster's control planes to its current
// secrets encryption key after a rotation (`imagebuild config cluster
// --rotate-secrets-key` and a signed change per control plane), in the
// Kubernetes documentation's order: every kube-apiserver reads the new
// key before any writes with it; once all write with it, every Secret is
// written again; then the retired keys go. Each control plane runs a
// Rotator as a controller. Their common record is a ConfigMap in
// kube-system that only the cluster's admins may write (nodes cannot):
// which key it is about, which control planes read and write with it,
// and whether every Secret has been written again since the last control
// plane began writing with it. A control plane's stage is a function of
// that record, each step is idempotent, and the record lives in etcd: a
// power cut anywhere resumes at the next look.
package secretskeys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/noderole"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Step is the name the Rotator reports under (the console's "secrets
// encryption: …" lines).
const Step = "secrets encryption"

// The record: a ConfigMap in kube-system.
const (
	RecordNamespace = "kube-system"
	RecordName      = "terrarium-secrets-encryption"
	// keyField names the key the record is about (its name, never the
	// key); readsPrefix+node and writesPrefix+node name the key that
	// control plane's kube-apiserver reads and writes with;
	// rewrittenField names the key every Secret was written with again,
	// after every control plane recorded writing with it.
	keyField       = "key"
	readsPrefix    = "reads."
	writesPrefix   = "writes."
	rewrittenField = "rewritten"
)

// apiServerContainer is kube-apiserver's container name in its static
// pod.
const apiServerContainer = "kube-apiserver"

// stopTimeout is how long kube-apiserver is given to end when it is
// restarted to read a new encryption configuration.
const stopTimeout = 30 * time.Second

// API is what a Rotator asks of the cluster's API, as its admin
// (kubeclient.Client).
type API interface {
	Nodes(ctx context.Context) ([]kubeclient.Node, error)
	ConfigMap(ctx context.Context, namespace, name string) (kubeclient.ConfigMap, error)
	CreateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error)
	UpdateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error)
	RewriteSecrets(ctx context.Context, progress func(rewritten int)) (int, error)
}

var _ API = (*kubeclient.Client)(nil)

// LocalAPI is this control plane's own kube-apiserver.
type LocalAPI interface {
	Version(ctx context.Context) (string, error)
}

// Runtime is the container runtime, over the CRI (cri.Client).
type Runtime interface {
	// Created is when the running container of name was created (zero:
	// none runs).
	Created(ctx context.Context, name string) (time.Time, error)
	// Stop stops the running containers of name; the kubelet starts a
	// new one.
	Stop(ctx context.Context, name string, timeout time.Duration) error
}

// Rotator is one control plane's part in moving to the current key.
type Rotator struct {
	// Node is this control plane's Node name.
	Node string
	// Root is the host's root (the encryption configuration is
	// layout.EncryptionConfigFile under it).
	Root    string
	API     API
	Local   LocalAPI
	Runtime Runtime
	// Report hears each new state once: step.Changed (a stage's file
	// written, kube-apiserver restarting), step.Waiting, step.Progress
	// (Secrets being rewritten) and step.Done.
	Report func(result step.Result, detail string)
	Log    *slog.Logger

	// said is the last report, so that a look that finds the same says
	// nothing.
	said string
	// restart is set when this Rotator wrote the file and kube-apiserver
	// has not been restarted since: the restart does not hang on
	// timestamps (a file's time is as coarse as the kernel's tick).
	restart bool
}

// record is the ConfigMap's data, read at a version.
type record struct {
	kubeclient.ConfigMap
}

func (r record) get(k string) string { return r.Data[k] }

// Result is where a Pass left the node.
type Result struct {
	// Stage is the stage the record lets the node be at.
	Stage kubeadmconfig.EncryptionStage
	// Settled: the node is done, as the record says, and its
	// kube-apiserver runs on that stage: nothing is left to do until the
	// config or the cluster's control planes change.
	Settled bool
}

// Pass looks once: it brings the encryption configuration to the stage
// the record allows, restarts kube-apiserver when it has not read it,
// records what this control plane reads and writes with, and rewrites
// every Secret when every control plane writes with the current key and
// that has not been done. A control plane without a key, or a worker,
// does nothing (and is settled).
func (r *Rotator) Pass(ctx context.Context, c *machineconfig.Cluster) (Result, error) {
	st, settled, err := r.pass(ctx, c)
	return Result{Stage: st, Settled: settled}, err
}

func (r *Rotator) pass(ctx context.Context, c *machineconfig.Cluster) (kubeadmconfig.EncryptionStage, bool, error) {
	if c == nil || !c.IsControlPlane() || c.SecretsEncryptionKey == "" {
		return 0, true, nil
	}
	current, err := kubeadmconfig.EncryptionKeyName(c.SecretsEncryptionKey)
	if err != nil {
		return 0, false, err
	}
	retired := make([]string, 0, len(c.RetiredSecretsEncryptionKeys))
	for _, k := range c.RetiredSecretsEncryptionKeys {
		n, err := kubeadmconfig.EncryptionKeyName(k)
		if err != nil {
			return 0, false, err
		}
		retired = append(retired, n)
	}
	rec, err := r.record(ctx, current, retired)
	if err != nil || rec == nil {
		return 0, false, err
	}
	cps, err := r.controlPlanes(ctx, c.ControlPlanes)
	if err != nil {
		return 0, false, err
	}
	st := r.stage(rec, current, cps)

	// The file, and kube-apiserver on it.
	want, err := kubeadmconfig.EncryptionConfig(c, st)
	if err != nil {
		return st, false, err
	}
	path := r.path()
	if got, err := os.ReadFile(path); err != nil || string(got) != string(want) {
		if err := atomicfile.WriteFile(path, want, 0o600); err != nil {
			return st, false, fmt.Errorf("write %s: %w", layout.EncryptionConfigFile, err)
		}
		r.restart = true
		r.say(step.Changed, fmt.Sprintf("%s: kube-apiserver %s; restarting it", st, describe(c, st)))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return st, false, err
	}
	created, err := r.Runtime.Created(ctx, apiServerContainer)
	if err != nil {
		return st, false, err
	}
	if created.IsZero() {
		r.say(step.Waiting, "kube-apiserver is not running")
		return st, false, nil
	}
	// A kube-apiserver created before the file was written (by this
	// Rotator, or before a power cut) has not read it.
	if r.restart || created.Before(fi.ModTime()) {
		if err := r.Runtime.Stop(ctx, apiServerContainer, stopTimeout); err != nil {
			return st, false, fmt.Errorf("restart kube-apiserver to read %s: %w", layout.EncryptionConfigFile, err)
		}
		r.restart = false
		r.say(step.Waiting, fmt.Sprintf("%s: kube-apiserver restarts to read %s", st, layout.EncryptionConfigFile))
		return st, false, nil
	}
	if _, err := r.Local.Version(ctx); err != nil {
		r.say(step.Waiting, fmt.Sprintf("%s: kube-apiserver is starting", st))
		return st, false, nil
	}

	// What this control plane does, on the record.
	update := map[string]string{}
	if rec.get(readsPrefix+r.Node) != current {
		update[readsPrefix+r.Node] = current
	}
	if st >= kubeadmconfig.EncryptionWrite && rec.get(writesPrefix+r.Node) != current {
		update[writesPrefix+r.Node] = current
		// A control plane that begins writing with the key after the
		// Secrets were rewritten (one joined since) may have written
		// some with an older key while it started: rewrite again.
		update[rewrittenField] = ""
	}
	if len(update) > 0 {
		if err := r.update(ctx, rec, update); err != nil {
			return st, false, err
		}
		return st, false, nil
	}

	switch {
	case st == kubeadmconfig.EncryptionPrepare:
		var missing []string
		for _, n := range cps {
			if n != r.Node && rec.get(readsPrefix+n) != current {
				missing = append(missing, n)
			}
		}
		r.say(step.Waiting, fmt.Sprintf("this control plane reads %s; waiting for every control plane to read it before any writes with it (not yet: %s; each needs the config that holds it, as a signed change)",
			current, strings.Join(missing, ", ")))
	case st == kubeadmconfig.EncryptionWrite && rec.get(rewrittenField) != current:
		for _, n := range cps {
			if rec.get(writesPrefix+n) != current {
				r.say(step.Waiting, fmt.Sprintf("this control plane writes with %s; waiting for %s to write with it before the Secrets are rewritten", current, n))
				return st, false, nil
			}
		}
		r.say(step.Progress, fmt.Sprintf("rewriting every Secret with %s", current))
		n, err := r.API.RewriteSecrets(ctx, func(k int) { r.Log.Info("rewriting Secrets", "rewritten", k, "key", current) })
		if err != nil {
			return st, false, err
		}
		if err := r.update(ctx, rec, map[string]string{rewrittenField: current}); err != nil {
			return st, false, err
		}
		r.Log.Info("rewrote every Secret", "secrets", n, "key", current)
	case st == kubeadmconfig.EncryptionDone:
		if len(retired) > 0 {
			r.say(step.Done, fmt.Sprintf("every Secret is written with %s; kube-apiserver no longer reads the retired keys %s", current, strings.Join(retired, ", ")))
		} else {
			r.say(step.Done, fmt.Sprintf("every Secret is written with %s", current))
		}
		return st, true, nil
	}
	return st, false, nil
}

// describe says what kube-apiserver does at stage st of c's keys.
func describe(c *machineconfig.Cluster, st kubeadmconfig.EncryptionStage) string {
	name := func(k string) string {
		n, _ := kubeadmconfig.EncryptionKeyName(k)
		return n
	}
	current := name(c.SecretsEncryptionKey)
	switch {
	case st == kubeadmconfig.EncryptionPrepare && len(c.RetiredSecretsEncryptionKeys) > 0:
		return fmt.Sprintf("reads %s and writes with %s until every control plane reads %s", current, name(c.RetiredSecretsEncryptionKeys[0]), current)
	case st == kubeadmconfig.EncryptionDone:
		return fmt.Sprintf("reads and writes with %s alone", current)
	default:
		return fmt.Sprintf("writes with %s and reads every key", current)
	}
}

// stage is where the record lets this control plane be: done once every
// Secret was rewritten with current after this node began writing with
// it; write once every other control plane reads current (this one does
// at every stage); else prepare.
func (r *Rotator) stage(rec *record, current string, cps []string) kubeadmconfig.EncryptionStage {
	if rec.get(rewrittenField) == current && rec.get(writesPrefix+r.Node) == current {
		return kubeadmconfig.EncryptionDone
	}
	for _, n := range cps {
		if n != r.Node && rec.get(readsPrefix+n) != current {
			return kubeadmconfig.EncryptionPrepare
		}
	}
	return kubeadmconfig.EncryptionWrite
}

// record reads the cluster's record, made for current when there is none
// and started afresh when it is about a key this node retired. A record
// about a key this node does not know is a rotation this node's config
// has not been given: it says so and returns nil.
func (r *Rotator) record(ctx context.Context, current string, retired []string) (*record, error) {
	m, err := r.API.ConfigMap(ctx, RecordNamespace, RecordName)
	switch {
	case errors.Is(err, kubeclient.ErrNotFound):
		m, err = r.API.CreateConfigMap(ctx, kubeclient.ConfigMap{Namespace: RecordNamespace, Name: RecordName, Data: map[string]string{keyField: current}})
		if err != nil {
			return nil, fmt.Errorf("record the secrets encryption key: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("read the record of the secrets encryption key: %w", err)
	}
	rec := &record{m}
	switch k := rec.get(keyField); {
	case k == current:
		return rec, nil
	case k == "" || slices.Contains(retired, k):
		m.Data = map[string]string{keyField: current}
		m, err = r.API.UpdateConfigMap(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("record the secrets encryption key: %w", err)
		}
		r.Log.Info("the cluster moves to a new secrets encryption key", "key", current, "from", k)
		return &record{m}, nil
	default:
		r.say(step.Waiting, fmt.Sprintf("the cluster's Secrets move to %s, which this control plane's config does not hold (it has %s): bring it its config from `%s` as a signed change", k, current, machineconfig.RotateSecretsKeyCommand))
		return nil, nil
	}
}

// update sets fields of the record (an empty value removes one) at the
// version read; a conflict is an error, and the next look reads again.
func (r *Rotator) update(ctx context.Context, rec *record, fields map[string]string) error {
	m := rec.ConfigMap
	m.Data = maps.Clone(m.Data)
	if m.Data == nil {
		m.Data = map[string]string{}
	}
	for k, v := range fields {
		if v == "" {
			delete(m.Data, k)
		} else {
			m.Data[k] = v
		}
	}
	if _, err := r.API.UpdateConfigMap(ctx, m); err != nil {
		return fmt.Errorf("update the record of the secrets encryption key: %w", err)
	}
	return nil
}

// controlPlanes are the names of the cluster's control planes: the Nodes
// labelled so, or at one of the config's control-plane addresses.
func (r *Rotator) controlPlanes(ctx context.Context, addresses []string) ([]string, error) {
	nodes, err := r.API.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the control planes: %w", err)
	}
	var cps []string
	for _, n := range nodes {
		if !noderole.IsWorker(n, addresses) {
			cps = append(cps, n.Name)
		}
	}
	if !slices.Contains(cps, r.Node) {
		cps = append(cps, r.Node)
	}
	slices.Sort(cps)
	return cps, nil
}

func (r *Rotator) path() string { return filepath.Join(r.Root, layout.EncryptionConfigFile) }

// say reports once what has not been said last.
func (r *Rotator) say(result step.Result, detail string) {
	s := string(result) + detail
	if s == r.said {
		return
	}
	r.said = s
	if r.Report != nil {
		r.Report(result, detail)
	}
}
