package statecrypt

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
)

// ErrUnfinished means a volume carries none of Terrarium's tokens: its
// creation did not finish (Create writes the sealed key last), so it never
// held anything.
var ErrUnfinished = errors.New("an encrypted volume whose creation did not finish")

// ErrNoSealedKey means a volume carries no key sealed by a TPM, only a
// recovery key.
var ErrNoSealedKey = errors.New("no key sealed by a TPM")

// ErrNoTPM means a volume's key is sealed by a TPM and the machine has
// none.
var ErrNoTPM = errors.New("no TPM 2.0 to unseal the key")

// Mapped is the device a volume opened as name is mapped to.
func Mapped(name string) string { return "/dev/mapper/" + name }

// Create makes v a new encrypted volume, erasing what it holds: a random
// key sealed by tpm against the Secure Boot state (PCR 7), LUKS2 under
// that key with the given label, opened as name, mkfs run on the opened
// device, and then the sealed key stored in the header as a TokenTPM —
// last, so that a volume without it is one whose creation did not finish
// (Unlock's ErrUnfinished). It returns the opened device.
func Create(ctx context.Context, v Volume, tpm transport.TPM, label, name string, mkfs func(ctx context.Context, dev string) error) (string, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	sealed, err := tpmseal.Seal(tpm, key, []int{tpmseal.SecureBootPCR})
	if err != nil {
		return "", err
	}
	sealedJSON, err := sealed.Marshal()
	if err != nil {
		return "", err
	}
	if err := v.Format(ctx, key, label); err != nil {
		return "", err
	}
	if err := v.Open(ctx, key, name); err != nil {
		return "", err
	}
	dev := Mapped(name)
	if err := mkfs(ctx, dev); err != nil {
		return "", fmt.Errorf("make the filesystem on %s: %w", dev, err)
	}
	if err := v.ImportToken(ctx, Token{Type: TokenTPM, Keyslots: []string{"0"}, Sealed: sealedJSON}); err != nil {
		return "", err
	}
	return dev, nil
}

// Unlock opens v as name with the key tpm unseals (tpm nil: the machine
// has none), trying each sealed key the header holds, and returns the
// opened device. Besides ErrUnfinished,
// ErrNoSealedKey and ErrNoTPM, tpmseal.ErrPolicy and tpmseal.ErrOtherTPM
// say why the TPM kept the key.
func Unlock(ctx context.Context, v Volume, tpm transport.TPM, name string) (string, error) {
	h, err := v.Header()
	if err != nil {
		return "", err
	}
	key, _, err := unseal(v, h, tpm)
	if err != nil {
		return "", err
	}
	if err := v.Open(ctx, key, name); err != nil {
		return "", err
	}
	return Mapped(name), nil
}

// Close closes the volume opened as name.
func Close(ctx context.Context, run Runner, name string) error {
	_, err := cryptsetup(ctx, run, nil, name, "close", name)
	return err
}
