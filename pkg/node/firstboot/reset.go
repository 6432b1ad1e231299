package firstboot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

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
	// Reboot restarts the machine once the request is recorded; nil
	// leaves it to the caller.
	Reboot func(ctx context.Context) error
}

// ResetWord is what a person types to confirm a reset.
const ResetWord = "erase"

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
	if !o.Yes {
		if _, err := fmt.Fprintf(o.Out, "Type %q to erase TERRA-STATE and reboot: ", ResetWord); err != nil {
			return fmt.Errorf("ask to confirm the reset (nothing was changed): %w", err)
		}
		line, _ := bufio.NewReader(o.In).ReadString('\n')
		if strings.TrimSpace(line) != ResetWord {
			return ErrResetDeclined
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
	b.WriteString("The slots (the OS) are kept. A control plane's etcd member must be removed from the cluster first.\n")
	return b.String()
}
