package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
)

// UpgradeStatusOptions are what `firstboot upgrade status` reads.
type UpgradeStatusOptions struct {
	Host *host.Host
	// API opens the cluster's API as this node; nil on a node of no
	// cluster.
	API func() (rollouts.API, error)
	Out io.Writer
}

// UpgradeStatus writes where upgrades stand: this node's version and last
// upgrade (its node state, read only), and on a cluster node the
// cluster's rollout, every node's phase in it, and the upgrades the
// cluster marked bad.
func UpgradeStatus(ctx context.Context, o UpgradeStatusOptions) error {
	h := o.Host
	rel, err := release.Load(h.Path(layout.ReleaseFile))
	if err != nil {
		return err
	}
	j, err := nodestate.On(h).ReadJournal()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "this node  %s %s\n", rel.Name, rel.Version)
	if u := j.Upgrade; u != nil {
		fmt.Fprintf(&b, "           last upgrade: %s\n", describeUpgrade(u))
	}
	if _, err := io.WriteString(o.Out, b.String()); err != nil {
		return err
	}
	if o.API == nil {
		return nil
	}
	api, err := o.API()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		_, werr := io.WriteString(o.Out, "cluster    this node has not joined a cluster\n")
		return werr
	case err != nil:
		_, werr := fmt.Fprintf(o.Out, "cluster    not reachable as this node: %v\n", err)
		return werr
	}
	rec, err := rollout.Load(ctx, api)
	if err != nil {
		return err
	}
	return writeRecord(o.Out, rec)
}

func describeUpgrade(u *nodestate.Upgrade) string {
	at := u.InstalledAt
	if !u.DoneAt.IsZero() {
		at = u.DoneAt
	}
	s := fmt.Sprintf("%s → %s (slot %s → %s) %s at %s, from %s", u.From, u.To, u.FromSlot, u.ToSlot, u.State, stamp(at), u.Source)
	if u.Reason != "" {
		s += ": " + u.Reason
	}
	return s
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// writeRecord draws the cluster's record: the rollout with a bar and a
// row per node in upgrade order, then the bad marks.
func writeRecord(w io.Writer, rec rollout.Record) error {
	var b strings.Builder
	if rec.Rollout == nil {
		b.WriteString("cluster    no upgrade has rolled out\n")
	} else if err := drawRollout(&b, rec); err != nil {
		return err
	}
	for _, bad := range rec.Bad {
		fmt.Fprintf(&b, "bad        %s rolled back on %s at %s: %s (not installed again without a signed force instruction)\n", bad.Version, bad.Node, stamp(bad.At), bad.Reason)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// drawRollout draws rec's rollout: what it installs, a bar, and a table
// of its nodes.
func drawRollout(b *strings.Builder, rec rollout.Record) error {
	ro := rec.Rollout
	kube := ""
	if ro.Kubernetes != "" {
		kube = " (Kubernetes " + ro.Kubernetes + ")"
	}
	fmt.Fprintf(b, "rollout    %s%s, started by %s at %s: %s\n", ro.Version, kube, ro.StartedBy, stamp(ro.StartedAt), ro.Phase)
	if f := describeForce(rec); f != "" {
		fmt.Fprintf(b, "           forced: %s\n", f)
	}
	if ro.Reason != "" {
		fmt.Fprintf(b, "           stopped: %s\n", ro.Reason)
	}
	done := 0
	for _, n := range ro.Nodes {
		if n.Phase == rollout.NodeDone {
			done++
		}
	}
	const width = 24
	filled := 0
	if len(ro.Nodes) > 0 {
		filled = done * width / len(ro.Nodes)
	}
	fmt.Fprintf(b, "           [%s%s] %d of %d nodes done\n", strings.Repeat("█", filled), strings.Repeat("░", width-filled), done, len(ro.Nodes))
	var rows strings.Builder
	rows.WriteString("           NODE\tROLE\tPHASE\tSINCE\tDETAIL\n")
	turn, _ := rec.Turn()
	for _, n := range ro.Nodes {
		role := "worker"
		if n.ControlPlane {
			role = "control plane"
		}
		since := "-"
		if !n.At.IsZero() {
			since = stamp(n.At)
		}
		phase := n.Phase
		if n.Name == turn.Name && ro.Phase == rollout.Rolling {
			phase += " ◀"
		}
		fmt.Fprintf(&rows, "           %s\t%s\t%s\t%s\t%s\n", n.Name, role, phase, since, n.Detail)
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	if _, err := io.WriteString(tw, rows.String()); err != nil {
		return err
	}
	return tw.Flush()
}

// describeForce says what forces the rollout, "" when nothing does. The
// instruction is shown as it reads; every node checks its signature
// before it honors it.
func describeForce(rec rollout.Record) string {
	ro, in := rec.Rollout, rec.Instructions
	switch {
	case in != nil && in.Digest == ro.Digest && in.Force != "":
		i, err := upgrade.ParseInstruction([]byte(in.Force))
		if err != nil {
			return "by an instruction that does not read (" + err.Error() + "): no node honors it"
		}
		signer := ""
		if at := strings.Index(in.Force, "terrarium-signature"); at >= 0 {
			if k, err := signature.Signer([]byte(in.Force[at:])); err == nil {
				signer = ", signed by key " + k.ID()
			}
		}
		return "by the instruction to " + i.String() + signer + " (each node checks it with the keys it trusts for upgrades)"
	case ro.Forced:
		return "by an unsigned flag (a record of an older release): no node of this release forces it"
	}
	return ""
}
