package bootinit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/statecrypt"
	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
)

// defaultTPMDevice is the kernel's TPM 2.0 resource manager.
const defaultTPMDevice = "/dev/tpmrm0"

// errUnfinished: an encrypted TERRA-STATE whose creation a power cut
// interrupted (it carries none of Terrarium's tokens, which are written
// last): it never held anything, and is made again.
var errUnfinished = errors.New("an encrypted TERRA-STATE whose creation did not finish")

// chrootRunner runs the slot's cryptsetup for statecrypt.
type chrootRunner struct{ in *Init }

func (r chrootRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	return r.in.chrootOutput(ctx, stdin, name, args...)
}

func (in *Init) stateVolume(dev string) statecrypt.Volume {
	return statecrypt.Volume{Device: dev, Run: chrootRunner{in}}
}

// openTPM opens the machine's TPM 2.0; ok is false when it has none.
func (in *Init) openTPM() (tpm transport.TPMCloser, ok bool, err error) {
	if _, err := os.Stat(in.tpmDevice); errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	tpm, err = linuxtpm.Open(in.tpmDevice)
	if err != nil {
		return nil, false, fmt.Errorf("open the TPM %s: %w", in.tpmDevice, err)
	}
	return tpm, true, nil
}

// makeState makes a new TERRA-STATE on dev, erasing it: a LUKS2 volume
// whose key the TPM seals when the machine has a TPM, else a plain one. It
// returns the device that holds the filesystem and the encryption in
// force (layout.StateEncryption*, followed for a plain one by why).
func (in *Init) makeState(ctx context.Context, dev, reason string) (fsdev, encryption string, err error) {
	tpm, ok, err := in.openTPM()
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
	key := make([]byte, statecrypt.KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", "", err
	}
	sealed, err := tpmseal.Seal(tpm, key, []int{tpmseal.SecureBootPCR})
	if err != nil {
		return "", "", err
	}
	sealedJSON, err := sealed.Marshal()
	if err != nil {
		return "", "", err
	}
	vol := in.stateVolume(dev)
	if err := vol.Format(ctx, key, layout.LabelStateLUKS); err != nil {
		return "", "", err
	}
	if err := vol.Open(ctx, key, layout.StateMapperName); err != nil {
		return "", "", err
	}
	if err := in.mkfsState(ctx, layout.StateMapperDev); err != nil {
		return "", "", err
	}
	// Last: a volume without the token is an unfinished one
	// (errUnfinished), made again at the next boot.
	if err := vol.ImportToken(ctx, statecrypt.Token{Type: statecrypt.TokenTPM, Keyslots: []string{"0"}, Sealed: sealedJSON}); err != nil {
		return "", "", err
	}
	return layout.StateMapperDev, layout.StateEncryptionTPM, nil
}

func (in *Init) mkfsState(ctx context.Context, dev string) error {
	return in.chrootRun(ctx, "mkfs.ext4", "-F", "-q", "-L", layout.LabelStateFS, "-E", "lazy_itable_init=1,lazy_journal_init=1", dev)
}

// openState opens the encrypted TERRA-STATE on dev with the key the TPM
// unseals, and returns the device that holds its filesystem.
func (in *Init) openState(ctx context.Context, dev string) (string, error) {
	vol := in.stateVolume(dev)
	h, err := vol.Header()
	if err != nil {
		return "", err
	}
	tok, ok := h.Find(statecrypt.TokenTPM)
	if !ok {
		if _, rec := h.Find(statecrypt.TokenRecovery); !rec {
			return "", errUnfinished
		}
		return "", fmt.Errorf("TERRA-STATE %s carries no key sealed by a TPM: unlock it with its recovery key (docs/state-encryption.md)", dev)
	}
	sealed, err := tpmseal.Parse(tok.Sealed)
	if err != nil {
		return "", fmt.Errorf("TERRA-STATE %s: %w", dev, err)
	}
	tpm, ok, err := in.openTPM()
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("TERRA-STATE %s is encrypted, and this machine has no TPM 2.0 to unseal its key: was the disk moved from another machine, or the TPM switched off in the firmware? Switch it on, or unlock with the recovery key (docs/state-encryption.md)", dev)
	}
	defer tpm.Close()
	key, err := tpmseal.Unseal(tpm, sealed)
	switch {
	case errors.Is(err, tpmseal.ErrPolicy):
		return "", fmt.Errorf("the TPM does not release TERRA-STATE's key: the Secure Boot state changed since it was sealed (PCR 7: the firmware's Secure Boot keys, or Secure Boot switched on or off). Put the firmware's Secure Boot settings back, or unlock with the recovery key (docs/state-encryption.md): %w", err)
	case errors.Is(err, tpmseal.ErrOtherTPM):
		return "", fmt.Errorf("TERRA-STATE's key was sealed by another TPM: the disk was moved from another machine, or this machine's TPM was cleared. Unlock with the recovery key (docs/state-encryption.md): %w", err)
	case err != nil:
		return "", err
	}
	if err := vol.Open(ctx, key, layout.StateMapperName); err != nil {
		return "", err
	}
	in.say("opened encrypted TERRA-STATE %s with the key this machine's TPM unsealed", dev)
	return layout.StateMapperDev, nil
}

// closeState closes the opened encrypted TERRA-STATE.
func (in *Init) closeState(ctx context.Context) error {
	_, err := in.chrootOutput(ctx, nil, "cryptsetup", "close", layout.StateMapperName)
	return err
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

// blockName is the kernel's name of the block device dev ("vda3",
// "dm-0"), found by its device number: /dev/mapper's nodes are not named
// so.
func blockName(dev string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: dev, Err: err}
	}
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	if err != nil {
		return "", err
	}
	return filepath.Base(link), nil
}
