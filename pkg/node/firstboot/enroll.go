package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/controller/configchange"
)

// errStoredConfig marks a stored state that cannot be used.
var errStoredConfig = errors.New("the stored node config is unusable")

// loadStored reads the stored config and checks it against the journal's
// digest: the enrolled config's, or a pending change's that a power cut
// left uncommitted (settleStored finishes that commit).
func (r *runner) loadStored(e *nodestate.Enrollment) (*machineconfig.Config, error) {
	data, err := nodestate.On(r.o.Host).ReadConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %w; `firstboot reset` re-enrolls the node", errStoredConfig, err)
	}
	p := nodestate.ConfigFile.String()
	cfg, err := machineconfig.Parse(p, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w; `firstboot reset` re-enrolls the node", errStoredConfig, err)
	}
	if !e.Accepts(cfg.Digest()) {
		return nil, fmt.Errorf("%w: %s has digest %s, the journal says %s; `firstboot reset` re-enrolls the node", errStoredConfig, p, cfg.Digest(), e.Digest)
	}
	return cfg, nil
}

// settleStored resolves, at boot, a change commit a power cut
// interrupted: the journal named the change (Pending) before its config
// was stored. A stored new config finishes the commit; an old one drops
// the pending change, which a change source may offer again.
func (r *runner) settleStored(cfg *machineconfig.Config) error {
	var did string
	var serr error
	err := r.record(func(j *nodestate.Journal, _ *nodestate.BootRecord) {
		did, serr = j.Enrollment.Settle(cfg.Digest())
	})
	if serr != nil {
		return fmt.Errorf("%w: %w; `firstboot reset` re-enrolls the node", errStoredConfig, serr)
	}
	if err != nil {
		return fmt.Errorf("settle the stored config's commit: %w", err)
	}
	switch did {
	case nodestate.SettleFinished:
		r.say("the config change %s was stored before a power cut: its commit is finished", cfg.Digest())
	case nodestate.SettleDropped:
		r.say("a config change was cut short before its config was stored: this node keeps its enrolled config %s", cfg.Digest())
	}
	return nil
}

// openEnrolled opens a runner for a command that needs the node enrolled and
// loads its stored config; notEnrolled completes the error for a node that
// is not ("this node is not enrolled: " + notEnrolled).
func openEnrolled(o Options, notEnrolled string) (*runner, *machineconfig.Config, error) {
	r, err := newRunner(o)
	if err != nil {
		return nil, nil, err
	}
	// A command beside the node's service: status.json and the banner are
	// the service's.
	r.pub = status.NewPublisher("", io.Discard, o.Log, r.pub.Get())
	r.rollouts = r.newRollouts() // which holds the publisher
	e, _ := r.journal()
	if e == nil {
		return nil, nil, errors.New("this node is not enrolled: " + notEnrolled)
	}
	cfg, err := r.loadStored(e)
	if err != nil {
		return nil, nil, err
	}
	return r, cfg, nil
}

// store makes cfg the node's desired state: written 0600 and synced before
// the journal names it.
func (r *runner) store(cfg *machineconfig.Config) error {
	data, err := cfg.Marshal()
	if err != nil {
		return fmt.Errorf("store the node config: %w", err)
	}
	return nodestate.On(r.o.Host).StoreConfig(data)
}

// enroll stores the first valid config as the node's desired state.
func (r *runner) enroll(cfg *machineconfig.Config, from string) error {
	if err := r.store(cfg); err != nil {
		return err
	}
	e := &nodestate.Enrollment{Digest: cfg.Digest(), Source: from, At: r.o.Host.Now().UTC(), Generation: cfg.Generation}
	if err := r.record(func(j *nodestate.Journal, _ *nodestate.BootRecord) { j.Enrollment = e }); err != nil {
		return err
	}
	r.say("enrolled from %s (%s): this node now boots from its stored config; the config medium may be removed", from, cfg.Digest())
	return nil
}

// commitChange makes an applied change the desired state, in the durable
// writes of commitWrites.
func (r *runner) commitChange(ch *change) error {
	for _, w := range r.commitWrites(ch) {
		if err := w.write(); err != nil {
			return fmt.Errorf("commit the config change (%s): %w", w.name, err)
		}
	}
	return nil
}

// commitWrite is one durable, atomic write of a change's commit.
type commitWrite struct {
	name  string
	write func() error
}

// commitWrites are the writes that commit a change, in order: the journal
// names the change as pending, the config is stored, the journal commits
// it. Each write is atomic, so a power cut leaves the state after some
// prefix of them, and every prefix boots (settleStored): to the old config
// before the store, to the new one after it.
func (r *runner) commitWrites(ch *change) []commitWrite {
	pending := &nodestate.ConfigChange{Digest: ch.cfg.Digest(), Source: ch.from, SignedBy: ch.signer,
		At: r.o.Host.Now().UTC(), Generation: ch.cfg.Generation, Revokes: ch.revokes}
	return []commitWrite{
		{"name it pending in the journal", func() error {
			return r.record(func(j *nodestate.Journal, _ *nodestate.BootRecord) { j.Enrollment.Pending = pending })
		}},
		{"store the config", func() error { return r.store(ch.cfg) }},
		{"commit it in the journal", func() error {
			return r.record(func(j *nodestate.Journal, _ *nodestate.BootRecord) { j.Enrollment.Commit() })
		}},
	}
}

// change is an accepted, not yet applied change request.
type change struct {
	cfg    *machineconfig.Config
	from   string
	signer string
	// revokes are the keys the change removes from trustedKeys.
	revokes []string
}

// probe asks the providers in order for a config; it logs what each looked
// at and why it moved on. It returns the first config found, or the
// problem to report (nil found and nil problem: nothing anywhere).
func (r *runner) probe(ctx context.Context, providers []configsource.Provider) (*configsource.Found, error) {
	for _, p := range providers {
		found, err := p.Fetch(ctx)
		switch {
		case errors.Is(err, configsource.ErrAbsent):
			r.o.Log.Debug("config source: moving on", "source", p.Name(), "why", err.Error())
		case err != nil:
			// The provider's error names the place it read.
			return nil, err
		default:
			r.o.Log.Info("config source: found a config", "source", p.Name(), "at", found.Source)
			return found, nil
		}
	}
	return nil, nil
}

// changeRequest looks for a config change on the change sources of an
// enrolled node and decides on it: accepted (returned), the same config
// (nil), or refused (said on the console and in the journal, nil).
// Nothing is applied here.
func (r *runner) changeRequest(ctx context.Context, stored *machineconfig.Config) *change {
	found, err := r.probe(ctx, r.o.ChangeSources)
	r.changeSeen = configchange.Offer{Found: found, Err: err}.Fingerprint()
	return r.decide(stored, found, err)
}

// decide judges what the change sources offered against the stored
// config.
func (r *runner) decide(stored *machineconfig.Config, found *configsource.Found, err error) *change {
	if err != nil {
		r.refuse("", fmt.Sprintf("the config medium cannot be read: %v", err))
		return nil
	}
	if found == nil {
		return nil
	}
	cfg, err := parseConfig(found.Source, found.Config)
	if err != nil {
		r.refuse(found.Source, "the config is invalid:\n"+err.Error())
		return nil
	}
	if cfg.Digest() == stored.Digest() {
		r.o.Log.Info("config source holds the enrolled config: nothing to change", "at", found.Source)
		return nil
	}
	if len(found.Signature) == 0 {
		r.refuse(found.Source, "it is not signed; sign it with `imagebuild config sign --key KEY machine.yaml` (or `imagebuild config disk --sign KEY`) using a key this node trusts ("+trustedIDs(stored)+")")
		return nil
	}
	e, _ := r.journal()
	if e == nil {
		e = &nodestate.Enrollment{}
	}
	key, err := signature.Verify(found.Signature, found.Config, configKeys(stored, e))
	if err != nil {
		r.refuse(found.Source, err.Error()+signerNote(found.Signature, e, stored))
		return nil
	}
	if err := replayed(e, cfg); err != nil {
		r.refuse(found.Source, err.Error())
		return nil
	}
	if err := readdsRevoked(e, cfg); err != nil {
		r.refuse(found.Source, err.Error())
		return nil
	}
	if err := immutableChanges(stored, cfg); err != nil {
		r.refuse(found.Source, err.Error())
		return nil
	}
	if err := r.admissible(cfg); err != nil {
		r.refuse(found.Source, "it cannot be applied on this node:\n"+err.Error())
		return nil
	}
	revokes := removedKeys(stored, cfg)
	if len(revokes) > 0 {
		r.say("config change from %s removes trusted keys %s: they never verify anything on this node again", found.Source, strings.Join(keyIDs(revokes), ", "))
	}
	r.say("config change from %s, generation %d, signed by %s (%s): accepted", found.Source, cfg.Generation, key.ID(), cfg.Digest())
	return &change{cfg: cfg, from: found.Source, signer: key.ID(), revokes: revokes}
}

// configKeys are the keys a change of stored may be signed by: those it
// trusts for configs, less any a signed change revoked.
func configKeys(stored *machineconfig.Config, e *nodestate.Enrollment) []signature.PublicKey {
	var out []signature.PublicKey
	for _, k := range stored.KeysFor(machineconfig.PurposeConfig) {
		if !slices.Contains(e.RevokedKeys, k.String()) {
			out = append(out, k)
		}
	}
	return out
}

// signerNote adds to a refused signature what this node knows of the key
// that made it: revoked by a signed change, or trusted for other purposes
// than configs.
func signerNote(sigFile []byte, e *nodestate.Enrollment, stored *machineconfig.Config) string {
	signer, err := signature.Signer(sigFile)
	if err != nil {
		return ""
	}
	if slices.Contains(e.RevokedKeys, signer.String()) {
		return fmt.Sprintf("; key %s was removed from trustedKeys by a signed change and never verifies on this node again", signer.ID())
	}
	for _, tk := range stored.TrustedKeys {
		if tk.Key == signer.String() && !tk.For(machineconfig.PurposeConfig) {
			return fmt.Sprintf("; this node trusts that key for %s only, not to sign configs", joinPurposes(tk.Purposes))
		}
	}
	return ""
}

func joinPurposes(ps []machineconfig.KeyPurpose) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// replayed refuses a signed config whose generation is not above the
// highest the node applied: an old stick must not bring an old config
// back (with a removed admin key or trusted key in it).
func replayed(e *nodestate.Enrollment, cfg *machineconfig.Config) error {
	if cfg.Generation > e.Generation {
		return nil
	}
	return fmt.Errorf("it is replayed: its generation is %d and this node already applied generation %d; "+
		"a change needs generation: %d or higher (edit generation: in machine.yaml and sign it again; `imagebuild config sign` shows the generation it signs)",
		cfg.Generation, e.Generation, e.Generation+1)
}

// readdsRevoked refuses a config that trusts a key a signed change
// removed.
func readdsRevoked(e *nodestate.Enrollment, cfg *machineconfig.Config) error {
	var bad []string
	for _, k := range cfg.TrustedPublicKeys() {
		if slices.Contains(e.RevokedKeys, k.String()) {
			bad = append(bad, k.ID())
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("it trusts key %s, which a signed change removed from this node: a removed key never verifies again; make a new key with `imagebuild config keygen`", strings.Join(bad, ", "))
}

// removedKeys are the keys stored trusts (for any purpose) and next does
// not.
func removedKeys(stored, next *machineconfig.Config) []string {
	keep := next.TrustedPublicKeys()
	var out []string
	for _, k := range stored.TrustedPublicKeys() {
		if !slices.Contains(keep, k) {
			out = append(out, k.String())
		}
	}
	return out
}

// keyIDs are the IDs of keys in signature's text form.
func keyIDs(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, s := range keys {
		if k, err := signature.ParsePublicKey(s); err == nil {
			out = append(out, k.ID())
		}
	}
	return out
}

func trustedIDs(c *machineconfig.Config) string {
	keys := c.KeysFor(machineconfig.PurposeConfig)
	if len(keys) == 0 {
		return "none: its config trusts no key for configs, so only `firstboot reset` changes it"
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID()
	}
	return "keys " + strings.Join(ids, ", ")
}

// refuse reports a refused change: nothing changes.
func (r *runner) refuse(from, why string) {
	if from == "" {
		from = "a config source"
	}
	// Recorded before it is said: whoever reads the console can rely on
	// the journal.
	r.note("config change", step.Refused, from+": "+why)
	r.say("config change from %s REFUSED: nothing changed, this node keeps its enrolled config. Why:", from)
	for _, line := range strings.Split(why, "\n") {
		r.say("  %s", line)
	}
	r.set(func(s *status.Status) { s.Message = "config change from " + from + " refused: " + why })
}

// immutableChanges refuses changes to what defines a formed node: its
// cluster, role, node IP, the cluster CA and secrets encryption key, and
// a cluster node's name.
// `firstboot reset` re-enrolls a node that must change them.
func immutableChanges(old, next *machineconfig.Config) error {
	var bad []string
	oc, nc := old.Cluster, next.Cluster
	switch {
	case oc == nil && nc == nil:
		return nil
	case oc == nil:
		bad = append(bad, "cluster: a standalone node cannot join a cluster by a change")
	case nc == nil:
		bad = append(bad, "cluster: a cluster node cannot leave its cluster by a change")
	default:
		if oc.Name != nc.Name {
			bad = append(bad, fmt.Sprintf("cluster.name: %q -> %q", oc.Name, nc.Name))
		}
		if oc.Role != nc.Role {
			bad = append(bad, fmt.Sprintf("cluster.role: %q -> %q", oc.Role, nc.Role))
		}
		if oc.NodeIP != nc.NodeIP {
			bad = append(bad, fmt.Sprintf("cluster.nodeIP: %s -> %s", oc.NodeIP, nc.NodeIP))
		}
		if oc.CACert != nc.CACert || oc.CACertHash != nc.CACertHash {
			bad = append(bad, "cluster.caCert: the cluster CA")
		}
		if k := droppedSecretsKeys(oc, nc); k != "" {
			bad = append(bad, k)
		}
		if old.Hostname != next.Hostname {
			bad = append(bad, fmt.Sprintf("hostname: %q -> %q (a cluster node's name is its Node's)", old.Hostname, next.Hostname))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("it changes what defines this formed node, which never changes in place (run `firstboot reset` to re-enroll instead):\n%s", strings.Join(bad, "\n"))
}

// droppedSecretsKeys says which of old's secrets encryption keys next
// drops, or "". A rotation (imagebuild config cluster
// --rotate-secrets-key) keeps the old key as retired, and retired keys
// are kept for good: the Secrets in etcd, and a backup's, may be
// encrypted with any of them. Keys are never quoted.
func droppedSecretsKeys(old, next *machineconfig.Cluster) string {
	keep := append([]string{next.SecretsEncryptionKey}, next.RetiredSecretsEncryptionKeys...)
	switch {
	case old.SecretsEncryptionKey != "" && !slices.Contains(keep, old.SecretsEncryptionKey):
		return "cluster.secretsEncryptionKey: a new key that does not keep the current one as retired (the cluster's Secrets in etcd are encrypted with it); rotate with `" + machineconfig.RotateSecretsKeyCommand + "`, which keeps it"
	case old.SecretsEncryptionKey == "" && next.SecretsEncryptionKey != "":
		return "cluster.secretsEncryptionKey: a key for a control plane formed without one (its configuration would change under a running cluster); re-enroll with `firstboot reset`"
	}
	for i, k := range old.RetiredSecretsEncryptionKeys {
		if !slices.Contains(keep, k) {
			return fmt.Sprintf("cluster.retiredSecretsEncryptionKeys[%d]: dropped; retired keys are kept for good (a backup may need one)", i)
		}
	}
	return ""
}

// RunPhase runs one phase alone against the node's stored config, for
// debugging (`firstboot run --phase network`): it checks, and applies only
// when the check finds a difference. "kubernetes/STEP" runs one kubeadm
// step of the node's role (kubeadmflow.RunStep), done before or not. The
// node must be enrolled.
func RunPhase(ctx context.Context, o Options, name string) error {
	r, cfg, err := openEnrolled(o, "`firstboot run` enrolls it from a config source first")
	if err != nil {
		return err
	}
	if id, ok := strings.CutPrefix(name, kubeadmflow.StepPhasePrefix); ok {
		if err := r.flow.RunStep(ctx, cfg, id); err != nil {
			r.note(name, step.Failed, err.Error())
			return fmt.Errorf("%s: %w", name, err)
		}
		r.say("%s: done", name)
		return r.step(name, step.Applied, "run alone")
	}
	phases := r.phases(cfg)
	for _, p := range phases {
		if p.Name != name {
			continue
		}
		verr := p.Verify(ctx, cfg)
		if verr == nil {
			r.say("%s: already as desired", name)
			return r.step(name, step.Verified, "run alone")
		}
		r.say("%s: %v; applying", name, verr)
		if err := p.Apply(ctx, cfg); err != nil {
			r.note(name, step.Failed, err.Error())
			return fmt.Errorf("%s: %w", name, err)
		}
		r.say("%s: applied", name)
		return r.step(name, step.Applied, "run alone")
	}
	names := strings.Join(phase.Names(phases), ", ")
	if cfg.Cluster != nil {
		names += "; and each kubeadm step alone, " + kubeadmflow.StepPhasePrefix + "STEP: " + strings.Join(kubeadmflow.StepIDs(cfg), ", ")
	}
	return fmt.Errorf("no phase %q; this node's phases are: %s", name, names)
}
