package firstboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/recoverykey"
	"github.com/terrarium-os/terrarium/pkg/node/boot/statecrypt"
	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
)

// ensureRecoveryKey gives an encrypted TERRA-STATE its recovery key, once:
// derived against the cluster's escrow key when cfg names one
// (state.recoveryKey), so that the operator recovers it from the node's
// recovery code with the cluster's secrets; else drawn at random and shown
// on the consoles this once. Neither is stored on the node: the header
// keeps only the recovery code. A failure is said and the node goes on
// (its STATE still opens with the TPM); the next boot tries again.
func (r *runner) ensureRecoveryKey(ctx context.Context, cfg *machineconfig.Config) {
	if r.stateEncryption != layout.StateEncryptionTPM {
		return
	}
	if err := r.addRecoveryKey(ctx, cfg); err != nil {
		r.say("TERRA-STATE's recovery key: NOT made (the next boot tries again): %v", err)
	}
}

func (r *runner) addRecoveryKey(ctx context.Context, cfg *machineconfig.Config) error {
	dev, err := mappedFrom(r.o.Host.Path("/"), layout.StateMapperName)
	if err != nil {
		return err
	}
	v := statecrypt.Volume{Device: dev, Run: statecrypt.Exec{}}
	have, ok, err := statecrypt.Recovery(v)
	if err != nil {
		return err
	}
	var pub recoverykey.PublicKey
	escrowed := cfg.StateRecoveryKey() != ""
	if escrowed {
		if pub, err = recoverykey.ParsePublicKey(cfg.StateRecoveryKey()); err != nil {
			return fmt.Errorf("state.recoveryKey: %w", err) // validated: not reached
		}
	}
	if ok {
		switch {
		case have.Escrow != "" && escrowed && have.Escrow != pub.ID():
			r.say("TERRA-STATE's recovery key is derived against escrow key %s; the config names %s, which applies when TERRA-STATE is made again", have.Escrow, pub.ID())
		case have.Escrow != "":
			r.say("TERRA-STATE's recovery key: derived against the cluster's escrow key %s (imagebuild config recovery-key gives it from the code a locked node shows)", have.Escrow)
		default:
			r.say("TERRA-STATE's recovery key: the one this node showed on its console when it was enrolled")
		}
		return nil
	}
	tpm, present, err := tpmseal.Open(r.o.Host.Path(tpmseal.Device))
	if err != nil {
		return err
	}
	if !present {
		return fmt.Errorf("no TPM 2.0 at %s to unseal TERRA-STATE's key with", tpmseal.Device)
	}
	defer tpm.Close()
	var key recoverykey.Key
	var tok statecrypt.Token
	if escrowed {
		var code recoverykey.Code
		if key, code, err = pub.Seal(); err != nil {
			return err
		}
		tok.Escrow, tok.Code = pub.ID(), code.String()
	} else {
		if key, err = recoverykey.New(nil); err != nil {
			return err
		}
		// Shown before it is added: a power cut between the two leaves a
		// key never added, and the next boot shows another. Straight to
		// the consoles, never to the journal (on STATE).
		_, _ = fmt.Fprintf(r.o.Console, "terrarium: TERRA-STATE's recovery key, shown this once — write it down and keep it apart from the machine; it opens this disk when the TPM will not (docs/state-encryption.md):\n"+
			"terrarium:     %s\n", key)
	}
	if err := statecrypt.AddRecovery(ctx, v, tpm, key.Passphrase(), tok); err != nil {
		return err
	}
	if tok.Escrow != "" {
		r.say("TERRA-STATE's recovery key: made, derived against the cluster's escrow key %s; recovery code %s", tok.Escrow, tok.Code)
	} else {
		r.say("TERRA-STATE's recovery key: made and shown above, this once")
	}
	return nil
}

// mappedFrom is the block device under the device-mapper device name
// (/dev/mapper/name, a device node or a link to one), from sysfs, both
// under root.
func mappedFrom(root, name string) (string, error) {
	var st unix.Stat_t
	p := filepath.Join(root, "dev/mapper", name)
	if err := unix.Stat(p, &st); err != nil {
		return "", fmt.Errorf("find TERRA-STATE's encrypted volume: %w", &os.PathError{Op: "stat", Path: p, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", fmt.Errorf("find TERRA-STATE's encrypted volume: %s is not a block device", p)
	}
	return under(root, p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
}

// under is the one block device under the device-mapper device p, whose
// numbers are major:minor, from sysfs under root.
func under(root, p string, major, minor uint32) (string, error) {
	dir := filepath.Join(root, "sys/dev/block", fmt.Sprintf("%d:%d", major, minor), "slaves")
	slaves, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("find the partition under %s: %w", p, err)
	}
	if len(slaves) != 1 {
		return "", fmt.Errorf("find the partition under %s: %d devices under it, want 1", p, len(slaves))
	}
	return filepath.Join(root, "dev", slaves[0].Name()), nil
}
