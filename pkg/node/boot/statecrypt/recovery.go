package statecrypt

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os/exec"
	"strconv"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
)

// RecoverySlot is the keyslot the recovery key opens; the sealed keys use
// the others.
const RecoverySlot = 1

// ErrWrongKey means a key opens none of a volume's keyslots.
var ErrWrongKey = errors.New("the key opens none of the volume's keyslots")

// ErrHasRecovery means a volume has a recovery key already.
var ErrHasRecovery = errors.New("the volume has a recovery key already")

// Recovery returns v's recovery token, if it has one.
func Recovery(v Volume) (Token, bool, error) {
	h, err := v.Header()
	if err != nil {
		return Token{}, false, err
	}
	t, ok := h.Find(TokenRecovery)
	return t, ok, nil
}

// AddRecovery gives v a recovery keyslot (RecoverySlot) that passphrase
// opens, authorized by the key tpm unseals, and then stores tok (its type
// and keyslots set here) in the header — last, so that a keyslot without
// it is one a power cut left, removed by the next try.
func AddRecovery(ctx context.Context, v Volume, tpm transport.TPM, passphrase []byte, tok Token) error {
	h, err := v.Header()
	if err != nil {
		return err
	}
	if _, ok := h.Find(TokenRecovery); ok {
		return fmt.Errorf("%s: %w", v.Device, ErrHasRecovery)
	}
	key, _, err := unseal(v, h, tpm)
	if err != nil {
		return err
	}
	slot := strconv.Itoa(RecoverySlot)
	if h.HasKeyslot(slot) && !named(h, slot) {
		if err := v.KillSlot(ctx, RecoverySlot); err != nil {
			return err
		}
	}
	if err := v.AddKey(ctx, key, passphrase, RecoverySlot); err != nil {
		return err
	}
	tok.Type, tok.Keyslots = TokenRecovery, []string{slot}
	return v.ImportToken(ctx, tok)
}

// UnlockWithRecovery opens v as name with the recovery key's passphrase
// and returns the opened device; a passphrase that opens nothing is
// ErrWrongKey.
func UnlockWithRecovery(ctx context.Context, v Volume, passphrase []byte, name string) (string, error) {
	if err := v.Open(ctx, passphrase, name); err != nil {
		// cryptsetup exits 2 for "no key available with this passphrase".
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 2 {
			return "", fmt.Errorf("%s: %w", v.Device, ErrWrongKey)
		}
		return "", err
	}
	return Mapped(name), nil
}

// Reseal gives v a new random key sealed by tpm against the Secure Boot
// state (PCR 7), authorized by passphrase (the recovery key's), and then
// removes the keys sealed before — by another TPM, or under another
// Secure Boot state — with their keyslots: afterwards this TPM, in this
// state, opens v, and no other does. Each step leaves a volume that opens:
// a power cut before the new token is stored leaves a keyslot no token
// names (removed by the next Reseal), one after it leaves both tokens, and
// Unlock tries each.
func Reseal(ctx context.Context, v Volume, tpm transport.TPM, passphrase []byte) error {
	h, err := v.Header()
	if err != nil {
		return err
	}
	killed := false
	for _, ks := range h.Keyslots {
		if !named(h, ks) {
			n, _ := strconv.Atoi(ks) // keyslot numbers are decimal (ReadHeader)
			if err := v.KillSlot(ctx, n); err != nil {
				return err
			}
			killed = true
		}
	}
	if killed {
		if h, err = v.Header(); err != nil {
			return err
		}
	}
	slot := 0
	for slot == RecoverySlot || h.HasKeyslot(strconv.Itoa(slot)) {
		slot++
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	sealed, err := tpmseal.Seal(tpm, key, []int{tpmseal.SecureBootPCR})
	if err != nil {
		return err
	}
	sealedJSON, err := sealed.Marshal()
	if err != nil {
		return err
	}
	if err := v.AddKey(ctx, passphrase, key, slot); err != nil {
		return err
	}
	if err := v.ImportToken(ctx, Token{Type: TokenTPM, Keyslots: []string{strconv.Itoa(slot)}, Sealed: sealedJSON}); err != nil {
		return err
	}
	for _, id := range h.All(TokenTPM) {
		if err := v.RemoveToken(ctx, id); err != nil {
			return err
		}
		for _, ks := range h.Tokens[id].Keyslots {
			n, err := strconv.Atoi(ks)
			if err != nil || n == RecoverySlot || n == slot || !h.HasKeyslot(ks) {
				continue
			}
			if err := v.KillSlot(ctx, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// named tells whether a token names keyslot slot.
func named(h *Header, slot string) bool {
	for _, t := range h.Tokens {
		for _, ks := range t.Keyslots {
			if ks == slot {
				return true
			}
		}
	}
	return false
}

// unseal has tpm unseal the key of one of h's TPM tokens, newest first,
// and returns it with its token's number. With none that opens, the error
// is the newest token's.
func unseal(v Volume, h *Header, tpm transport.TPM) ([]byte, string, error) {
	ids := h.All(TokenTPM)
	if len(ids) == 0 {
		if _, rec := h.Find(TokenRecovery); rec {
			return nil, "", fmt.Errorf("%s: %w", v.Device, ErrNoSealedKey)
		}
		return nil, "", fmt.Errorf("%s: %w", v.Device, ErrUnfinished)
	}
	var first error
	for i := len(ids) - 1; i >= 0; i-- {
		sealed, err := tpmseal.Parse(h.Tokens[ids[i]].Sealed)
		if err == nil && tpm == nil {
			err = ErrNoTPM
		}
		var key []byte
		if err == nil {
			key, err = tpmseal.Unseal(tpm, sealed)
		}
		if err == nil {
			return key, ids[i], nil
		}
		if first == nil {
			first = fmt.Errorf("%s: %w", v.Device, err)
		}
	}
	return nil, "", first
}
