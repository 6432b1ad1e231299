package bootinit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/statecrypt"
	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
)

// chrootRunner runs the slot's cryptsetup for statecrypt.
type chrootRunner struct{ in *Init }

func (r chrootRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	return r.in.chrootOutput(ctx, stdin, name, args...)
}

func (in *Init) stateVolume(dev string) statecrypt.Volume {
	return statecrypt.Volume{Device: dev, Run: chrootRunner{in}}
}

// makeState makes a new TERRA-STATE on dev, erasing it: a LUKS2 volume
// whose key the TPM seals when the machine has a TPM, else a plain one. It
// returns the device that holds the filesystem and the encryption in
// force (layout.StateEncryption*, followed for a plain one by why).
func (in *Init) makeState(ctx context.Context, dev, reason string) (fsdev, encryption string, err error) {
	tpm, ok, err := tpmseal.Open(in.tpmDevice)
	if err != nil {
		return "", "", err
	}
	plain := "this machine has no TPM 2.0"
	if ok {
		if _, err := os.Stat(filepath.Join(in.sysroot, "usr/sbin/cryptsetup")); err != nil {
			_ = tpm.Close() // not used
			ok, plain = false, "this image carries no cryptsetup (its build spec's os.packages lacks cryptsetup-bin)"
		}
	}
	if !ok {
		in.say("formatting TERRA-STATE %s as ext4, NOT encrypted: %s (reason: %s)", dev, plain, reason)
		return dev, layout.StateEncryptionNone + " " + plain, in.mkfsState(ctx, dev)
	}
	defer tpm.Close()
	in.say("encrypting TERRA-STATE %s (LUKS2, its key sealed to this machine's TPM against the Secure Boot state, PCR 7; reason: %s)", dev, reason)
	fsdev, err = statecrypt.Create(ctx, in.stateVolume(dev), tpm, layout.LabelStateLUKS, layout.StateMapperName, in.mkfsState)
	if err != nil {
		return "", "", err
	}
	return fsdev, layout.StateEncryptionTPM, nil
}

func (in *Init) mkfsState(ctx context.Context, dev string) error {
	return in.chrootRun(ctx, "mkfs.ext4", "-F", "-q", "-L", layout.LabelStateFS, "-E", "lazy_itable_init=1,lazy_journal_init=1", dev)
}

// openState opens the encrypted TERRA-STATE on dev with the key the TPM
// unseals, and returns the device that holds its filesystem. An unfinished
// one is statecrypt.ErrUnfinished.
func (in *Init) openState(ctx context.Context, dev string) (string, error) {
	tpm, ok, err := tpmseal.Open(in.tpmDevice)
	if err != nil {
		return "", err
	}
	var t transport.TPM // nil: none
	if ok {
		defer tpm.Close()
		t = tpm
	}
	fsdev, err := statecrypt.Unlock(ctx, in.stateVolume(dev), t, layout.StateMapperName)
	const recovery = "unlock with the recovery key (docs/state-encryption.md)"
	switch {
	case errors.Is(err, statecrypt.ErrNoSealedKey):
		return "", fmt.Errorf("TERRA-STATE %s carries no key sealed by a TPM: %s", dev, recovery)
	case errors.Is(err, statecrypt.ErrNoTPM):
		return "", fmt.Errorf("TERRA-STATE %s is encrypted, and this machine has no TPM 2.0 to unseal its key: was the disk moved from another machine, or the TPM switched off in the firmware? Switch it on, or %s", dev, recovery)
	case errors.Is(err, tpmseal.ErrPolicy):
		return "", fmt.Errorf("the TPM does not release TERRA-STATE's key: the Secure Boot state changed since it was sealed (PCR 7: the firmware's Secure Boot keys, or Secure Boot switched on or off). Put the firmware's Secure Boot settings back, or %s: %w", recovery, err)
	case errors.Is(err, tpmseal.ErrOtherTPM):
		return "", fmt.Errorf("TERRA-STATE's key was sealed by another TPM: the disk was moved from another machine, or this machine's TPM was cleared. Unlock with the recovery key (docs/state-encryption.md): %w", err)
	case err != nil:
		return "", err
	}
	in.say("opened encrypted TERRA-STATE %s with the key this machine's TPM unsealed", dev)
	return fsdev, nil
}

// closeState closes the opened encrypted TERRA-STATE.
func (in *Init) closeState(ctx context.Context) error {
	return statecrypt.Close(ctx, chrootRunner{in}, layout.StateMapperName)
}

// writeStateEncryption tells the booted system which encryption
// TERRA-STATE has (layout.RunStateEncryption).
func (in *Init) writeStateEncryption(encryption string) error {
	p := in.stateEncryptionFile
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(encryption+"\n"), 0o644)
}
