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

// ErrNotFormed means the node's kubernetes phase has not run all its
// steps: its own service runs them, and no step runs beside it.
var ErrNotFormed = errors.New("the node has not formed or joined its cluster yet")

// RunStep runs the kubeadm step id of the config's role alone on a node
// whose kubernetes phase ran every step (kubeadm's phases, and Terrarium's
// own steps, may run again), under the cluster's join lock when the step
// takes it, with the same attempts, file modes and sync as in the phase.
// It is `firstboot run --phase kubernetes/ID`: for whoever redoes one step
// by hand. A node still forming is refused (ErrNotFormed): its service
// runs the steps, and a step run beside it would race it. The image unpack
// window is open while the step runs, and closed again after it (STATE
// synced) when it was closed before, so a later power cut keeps
// containerd's store.
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
	if done := stepsDone(f, c, all); done < len(all) {
		return fmt.Errorf("%w: %d of its %d kubeadm steps are done, and its own service runs the rest (firstboot status shows where it is); run a step alone once it has",
			ErrNotFormed, done, len(all))
	}
	wasOpen, err := unpackwindow.IsOpen(f.Host)
	if err != nil {
		return err
	}
	if err := unpackwindow.Open(f.Host); err != nil {
		return err
	}
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
		f.Report.Report(st.name, step.Done, "run alone")
		return nil
	}
	if st.oneAtATime {
		err = withJoinLock(ctx, f, c, st.name, run)
	} else {
		err = run(ctx)
	}
	if !wasOpen {
		if _, cerr := unpackwindow.Close(f.Host); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// stepsDone counts the steps of all the node's recorded progress holds
// for this node.
func stepsDone(f *Flow, c *machineconfig.Config, all []kubeadmStep) int {
	prog := readProgress(f)
	if prog == nil || prog.Node != NodeIdentity(c) {
		return 0
	}
	n := 0
	for _, st := range all {
		if prog.IsDone(st.name) {
			n++
		}
	}
	return n
}
