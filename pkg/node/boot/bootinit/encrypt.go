package bootinit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/recoverykey"
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
	fsdev, err = statecrypt.Create(ctx, in.stateVolume(dev), tpm, layout.LabelStateLUKS, layout.StateMapperName, func(ctx context.Context, mapped string) error {
		// Its sealed key is stored after this: a power cut from here on
		// leaves a volume the next boot makes again.
		in.say("encrypting TERRA-STATE %s: the LUKS2 volume is open as %s; making its filesystem", dev, mapped)
		return in.mkfsState(ctx, mapped)
	})
	if err != nil {
		return "", "", err
	}
	return fsdev, layout.StateEncryptionTPM, nil
}

func (in *Init) mkfsState(ctx context.Context, dev string) error {
	return in.chrootRun(ctx, "mkfs.ext4", "-F", "-q", "-L", layout.LabelStateFS, "-E", "lazy_itable_init=1,lazy_journal_init=1", dev)
}

// openState opens the encrypted TERRA-STATE on dev with the key the TPM
// unseals, and returns the device that holds its filesystem. When the TPM
// will not, the console says why and asks for the recovery key, which
// opens the volume and reseals it to this machine's TPM. An unfinished
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
	v := in.stateVolume(dev)
	fsdev, err := statecrypt.Unlock(ctx, v, t, layout.StateMapperName)
	if err == nil {
		in.say("opened encrypted TERRA-STATE %s with the key this machine's TPM unsealed", dev)
		return fsdev, nil
	}
	why := lockedBecause(dev, err)
	if why == "" {
		return "", err
	}
	rec, has, herr := statecrypt.Recovery(v)
	if herr != nil {
		return "", herr
	}
	if !has {
		return "", fmt.Errorf("%s; it has no recovery key (it was made before there was one): put the firmware back as it was, or erase it with %s on the kernel command line and enroll the node again (docs/state-encryption.md): %w",
			why, layout.CmdlineResetState, err)
	}
	in.say("%s (%v)", why, err)
	return in.recoverState(ctx, v, rec, t)
}

// lockedBecause says why the TPM kept TERRA-STATE's key, or "" for an
// error that is not about the TPM.
func lockedBecause(dev string, err error) string {
	switch {
	case errors.Is(err, statecrypt.ErrNoSealedKey):
		return fmt.Sprintf("TERRA-STATE %s carries no key sealed by a TPM", dev)
	case errors.Is(err, statecrypt.ErrNoTPM):
		return fmt.Sprintf("TERRA-STATE %s is encrypted, and this machine has no TPM 2.0 to unseal its key: the disk was moved from another machine, or the TPM is switched off in the firmware", dev)
	case errors.Is(err, tpmseal.ErrPolicy):
		return "the TPM does not release TERRA-STATE's key: the Secure Boot state changed since it was sealed (PCR 7: the firmware's Secure Boot keys, or Secure Boot switched on or off)"
	case errors.Is(err, tpmseal.ErrOtherTPM):
		return "TERRA-STATE's key was sealed by another TPM: the disk was moved from another machine, or this machine's TPM was cleared"
	}
	return ""
}

// recoveryTries is how many recovery keys a person may type before the
// boot gives up (and opens the rescue shell).
const recoveryTries = 5

// recoverState asks for TERRA-STATE's recovery key, opens v with it and
// reseals it to t (nil: this machine has no TPM, and the next boot asks
// again).
func (in *Init) recoverState(ctx context.Context, v statecrypt.Volume, rec statecrypt.Token, t transport.TPM) (string, error) {
	if rec.Escrow != "" {
		in.say("TERRA-STATE opens with its recovery key, which the cluster's secrets give: on the machine that keeps them run\n"+
			"    imagebuild config recovery-key --secrets secrets.yaml %s\n"+
			"  (this node's recovery code; the cluster's escrow key is %s) and type the key it prints. Or put the firmware back as it was and reboot.", rec.Code, rec.Escrow)
	} else {
		in.say("TERRA-STATE opens with its recovery key, which this node showed on its console when it was enrolled: type it. Or put the firmware back as it was and reboot.")
	}
	for try := 1; try <= recoveryTries; try++ {
		line, err := in.ask(ctx, fmt.Sprintf("terrarium-init: TERRA-STATE recovery key (try %d of %d; empty to give up): ", try, recoveryTries))
		if err != nil {
			return "", fmt.Errorf("ask for the recovery key: %w", err)
		}
		if strings.TrimSpace(line) == "" {
			return "", errors.New("no recovery key given")
		}
		key, err := recoverykey.Parse(line)
		if err != nil {
			in.say("%v", err)
			continue
		}
		fsdev, err := statecrypt.UnlockWithRecovery(ctx, v, key.Passphrase(), layout.StateMapperName)
		if errors.Is(err, statecrypt.ErrWrongKey) {
			in.say("that recovery key does not open TERRA-STATE %s", v.Device)
			continue
		}
		if err != nil {
			return "", err
		}
		in.say("opened encrypted TERRA-STATE %s with its recovery key", v.Device)
		if t == nil {
			in.say("no TPM 2.0 to seal its key to: the next boot asks for the recovery key again")
		} else if err := statecrypt.Reseal(ctx, v, t, key.Passphrase()); err != nil {
			in.say("resealing TERRA-STATE's key to this machine's TPM failed (the next boot asks for the recovery key again): %v", err)
		} else {
			in.say("resealed TERRA-STATE's key to this machine's TPM against the Secure Boot state (PCR 7); the key sealed before is removed: the next boot needs no recovery key")
		}
		return fsdev, nil
	}
	return "", fmt.Errorf("%d recovery keys typed, none opens TERRA-STATE %s", recoveryTries, v.Device)
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
