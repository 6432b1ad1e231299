package firstboot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// ResetOptions wire `firstboot reset`.
type ResetOptions struct {
	// Host is the machine reset (its root and clock).
	Host *host.Host
	// In answers the confirmation question; Out is where it is asked.
	In  io.Reader
	Out io.Writer
	// Yes skips the question.
	Yes bool
	// EraseVolumes confirms, with Yes, that the workloads' local volumes
	// on the node go too; without Yes the person is asked again for them.
	EraseVolumes bool
	// Reboot restarts the machine once the request is recorded; nil
	// leaves it to the caller.
	Reboot func(ctx context.Context) error
}

// ResetWord is what a person types to confirm a reset, and
// ResetVolumesWord what confirms that the node's local volumes go too.
const (
	ResetWord        = "erase"
	ResetVolumesWord = "erase volumes"
)

// ErrResetDeclined means the person did not confirm.
var ErrResetDeclined = errors.New("reset not confirmed: nothing was changed")

// Reset takes the node back to an unenrolled one: it says what the reset
// erases, asks for confirmation unless Yes, records the request on
// TERRA-STATE and reboots; the initramfs formats TERRA-STATE on the way up
// (as with terrarium.reset-state on the kernel command line), and the node
// enrolls again from the first valid config its sources offer.
func Reset(ctx context.Context, o ResetOptions) error {
	h := o.Host
	// Nothing is erased without saying what.
	if _, err := fmt.Fprint(o.Out, resetSummary(h)); err != nil {
		return fmt.Errorf("say what a reset erases (nothing was changed): %w", err)
	}
	volumes := localVolumes(h)
	if o.Yes {
		if len(volumes) > 0 && !o.EraseVolumes {
			return fmt.Errorf("%w: this node holds %d local volumes of workloads; add --erase-volumes to erase them with TERRA-STATE, or move their data first", ErrResetDeclined, len(volumes))
		}
	} else {
		in := bufio.NewReader(o.In)
		if _, err := fmt.Fprintf(o.Out, "Type %q to erase TERRA-STATE and reboot: ", ResetWord); err != nil {
			return fmt.Errorf("ask to confirm the reset (nothing was changed): %w", err)
		}
		if line, _ := in.ReadString('\n'); strings.TrimSpace(line) != ResetWord {
			return ErrResetDeclined
		}
		if len(volumes) > 0 {
			if _, err := fmt.Fprintf(o.Out, "The %d local volumes above go too; their data is not in any backup. Type %q to erase them: ", len(volumes), ResetVolumesWord); err != nil {
				return fmt.Errorf("ask to confirm erasing the volumes (nothing was changed): %w", err)
			}
			if line, _ := in.ReadString('\n'); strings.TrimSpace(line) != ResetVolumesWord {
				return ErrResetDeclined
			}
		}
	}
	if err := nodestate.On(h).RequestReset(h.Now()); err != nil {
		return err
	}
	// The request is recorded: it stands, and the reboot goes ahead,
	// whether or not these lines reach the person.
	_, _ = fmt.Fprintln(o.Out, "reset requested: TERRA-STATE is erased on the next boot")
	if o.Reboot == nil {
		return nil
	}
	_, _ = fmt.Fprintln(o.Out, "rebooting")
	return o.Reboot(ctx)
}

// resetSummary says what a reset erases.
func resetSummary(h *host.Host) string {
	var b strings.Builder
	b.WriteString("firstboot reset erases TERRA-STATE, the node's whole writable state:\n")
	if j, err := nodestate.On(h).ReadJournal(); err == nil && j.Enrollment != nil {
		fmt.Fprintf(&b, "  - the enrolled config (%s, enrolled %s)\n", j.Enrollment.Digest, j.Enrollment.Summary())
	} else {
		b.WriteString("  - the enrolled config (this node is not enrolled)\n")
	}
	b.WriteString("  - the journal and the Kubernetes progress (the node forms or joins its cluster again)\n")
	b.WriteString("  - every change to /etc (admin users, network files) and all of /var:\n")
	b.WriteString("    containerd's images and containers, the kubelet's state, this node's etcd data, the registry cache\n")
	if vs := localVolumes(h); len(vs) > 0 {
		fmt.Fprintf(&b, "  - the %d local volumes of workloads in %s (their data is in no backup):\n", len(vs), layout.LocalVolumesDir)
		for _, v := range vs {
			fmt.Fprintf(&b, "      %s\n", v)
		}
	}
	b.WriteString("The slots (the OS) are kept. A control plane's etcd member must be removed from the cluster first.\n")
	return b.String()
}

// localVolumes lists the volumes in the node's volume area
// (pvc-<uid>_<namespace>_<claim>), sorted.
func localVolumes(h *host.Host) []string {
	entries, err := os.ReadDir(h.Path(layout.LocalVolumesDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "pvc-") {
			out = append(out, e.Name())
		}
	}
	return out
}
