package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// StepPhasePrefix leads the name of one kubeadm step as `firstboot run
// --phase` takes it: "kubernetes/init-phase-certs-all".
const StepPhasePrefix = PhaseKubernetes + "/"

// StepID is how `firstboot run --phase kubernetes/ID` names a step: its
// name in lower case, each run of other characters than letters and
// digits one hyphen ("init phase certs all" → "init-phase-certs-all",
// "pod network (flannel)" → "pod-network-flannel").
func StepID(name string) string {
	var b strings.Builder
	hyphen := false
	for _, r := range strings.ToLower(name) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if hyphen && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			hyphen = false
			continue
		}
		hyphen = true
	}
	return b.String()
}

// ErrNoCluster means the config joins the node to no cluster: it has no
// kubeadm steps.
var ErrNoCluster = errors.New("the node's config has no cluster: it has no kubeadm steps")

// StepIDs are the IDs of the kubeadm steps of the config's role, in the
// order the kubernetes phase runs them.
func StepIDs(c *machineconfig.Config) []string {
	if c.Cluster == nil {
		return nil
	}
	var ids []string
	for _, st := range steps(c.Cluster) {
		ids = append(ids, StepID(st.name))
	}
	return ids
}

// RunStep runs the kubeadm step id of the config's role alone, whether the
// kubernetes phase ran it before or not (kubeadm's phases, and Terrarium's
// own steps, may run again), under the cluster's join lock when the step
// takes it, with the same attempts, file modes and sync as in the phase,
// and records it done. It is `firstboot run --phase kubernetes/ID`: for
// whoever finishes or redoes one step by hand.
func (f *Flow) RunStep(ctx context.Context, c *machineconfig.Config, id string) error {
	if c.Cluster == nil {
		return ErrNoCluster
	}
	var st *kubeadmStep
	all := steps(c.Cluster)
	for i := range all {
		if StepID(all[i].name) == id {
			st = &all[i]
			break
		}
	}
	if st == nil {
		return fmt.Errorf("no kubeadm step %q on a node of role %s; its steps, in order: %s",
			id, c.Cluster.Role, strings.Join(StepIDs(c), ", "))
	}
	if err := unpackwindow.Open(f.Host); err != nil {
		return err
	}
	prog := loadProgress(f, NodeIdentity(c))
	run := func(ctx context.Context) error {
		f.Report.Report(st.name, step.Started, "run alone")
		if err := runStep(ctx, f, c, *st); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		if err := tightenKubeadmFiles(f); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		if err := f.Sync(ctx); err != nil {
			return err
		}
		if !prog.IsDone(st.name) {
			if err := saveProgress(f, prog, st.name); err != nil {
				return err
			}
		}
		f.Report.Report(st.name, step.Done, "run alone")
		return nil
	}
	if st.oneAtATime {
		return withJoinLock(ctx, f, c, st.name, run)
	}
	return run(ctx)
}
