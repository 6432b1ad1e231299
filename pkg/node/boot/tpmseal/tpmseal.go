// Package tpmseal seals a small secret — TERRA-STATE's volume key — to the
// machine's TPM 2.0 against the values of some of its PCRs, and unseals it
// again while they hold those values.
//
// The sealed object is a keyed-hash object under the owner hierarchy's
// storage root key, which the TPM derives from its own seed each time
// (CreatePrimary with the standard ECC template): nothing is persisted in
// the TPM, and a sealed object opens only on the TPM that made it. Its
// only authorization is a PolicyPCR policy over the chosen PCRs (PCR 7,
// the Secure Boot state: the firmware's keys and whether Secure Boot is
// on), so any other firmware policy, and any TPM clear, leaves it shut.
// Dictionary-attack protection is off for it (noDA): a failed policy is
// not a guess at a password, and a node that reboots in a loop must not
// lock its own TPM out.
//
// Unsealing uses a session salted with the storage key, its response
// encrypted: the secret crosses the bus between the TPM and the CPU
// encrypted, not in the clear.
package tpmseal

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

// SecureBootPCR is PCR 7: the firmware measures into it whether Secure
// Boot is on, its PK, KEK, db and dbx, and the db entry that verified each
// image it ran. Our upgrades sign with the key the firmware already
// trusts, so it stays the same across them.
const SecureBootPCR = 7

// Device is the kernel's TPM 2.0 resource manager, which every program
// shares.
const Device = "/dev/tpmrm0"

// Open opens the TPM 2.0 at path (Device); ok is false when the machine
// has none.
func Open(path string) (tpm transport.TPMCloser, ok bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	tpm, err = linuxtpm.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("open the TPM %s: %w", path, err)
	}
	return tpm, true, nil
}

// MaxSecret is the largest secret Seal takes (a keyed-hash object's
// sensitive data holds up to 128 bytes).
const MaxSecret = 128

// ErrPolicy means the PCRs no longer hold the values the secret was
// sealed against: the firmware's Secure Boot keys or its Secure Boot
// state changed, or the machine booted something else.
var ErrPolicy = errors.New("the TPM's PCRs do not match the sealed policy")

// ErrOtherTPM means the sealed object is not this TPM's: the disk moved
// to another machine, or the TPM was cleared.
var ErrOtherTPM = errors.New("the sealed object belongs to another TPM (or the TPM was cleared)")

// Sealed is a sealed secret as it is stored beside the volume it opens: it
// holds nothing that opens the volume without the TPM.
type Sealed struct {
	// PCRs are the SHA-256 PCRs the secret is sealed against.
	PCRs []int `json:"pcrs"`
	// Policy is the policy digest the object carries: the PCRs' values
	// at sealing, folded into PolicyPCR.
	Policy []byte `json:"policy"`
	// Public and Private are the object's TPM2B_PUBLIC and
	// TPM2B_PRIVATE (the private part encrypted by the storage key).
	Public  []byte `json:"public"`
	Private []byte `json:"private"`
}

// Parse reads a Sealed from its JSON, checking what Unseal relies on. The
// JSON comes from a disk's header, so from outside.
func Parse(b []byte) (*Sealed, error) {
	var s Sealed
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("sealed key: %w", err)
	}
	if err := checkPCRs(s.PCRs); err != nil {
		return nil, fmt.Errorf("sealed key: pcrs: %w", err)
	}
	if len(s.Policy) != sha256.Size {
		return nil, fmt.Errorf("sealed key: policy: %d bytes, want %d (SHA-256)", len(s.Policy), sha256.Size)
	}
	if err := sized(s.Public); err != nil {
		return nil, fmt.Errorf("sealed key: public: %w", err)
	}
	pub, err := tpm2.Unmarshal[tpm2.TPM2BPublic](s.Public)
	if err != nil {
		return nil, fmt.Errorf("sealed key: public: %w", err)
	}
	contents, err := pub.Contents()
	if err != nil {
		return nil, fmt.Errorf("sealed key: public: %w", err)
	}
	if contents.Type != tpm2.TPMAlgKeyedHash || contents.NameAlg != tpm2.TPMAlgSHA256 {
		return nil, fmt.Errorf("sealed key: public: not a SHA-256 keyed-hash (sealed data) object")
	}
	if !slices.Equal(contents.AuthPolicy.Buffer, s.Policy) {
		return nil, fmt.Errorf("sealed key: public: its policy is not the one named")
	}
	if contents.ObjectAttributes.UserWithAuth {
		return nil, fmt.Errorf("sealed key: public: it opens with a password, not only with its policy")
	}
	if err := sized(s.Private); err != nil {
		return nil, fmt.Errorf("sealed key: private: %w", err)
	}
	if _, err := tpm2.Unmarshal[tpm2.TPM2BPrivate](s.Private); err != nil {
		return nil, fmt.Errorf("sealed key: private: %w", err)
	}
	return &s, nil
}

// sized checks that b is one TPM2B: a big-endian 16-bit size, then that
// many bytes, and nothing after.
func sized(b []byte) error {
	if len(b) < 2 || int(binary.BigEndian.Uint16(b)) != len(b)-2 {
		return fmt.Errorf("%d bytes that are not one sized TPM structure", len(b))
	}
	return nil
}

// Marshal is s's JSON, which Parse reads.
func (s *Sealed) Marshal() ([]byte, error) { return json.Marshal(s) }

func checkPCRs(pcrs []int) error {
	if len(pcrs) == 0 {
		return errors.New("none named")
	}
	for i, p := range pcrs {
		if p < 0 || p > 23 {
			return fmt.Errorf("PCR %d: a PC client TPM has PCRs 0 to 23", p)
		}
		if i > 0 && p <= pcrs[i-1] {
			return fmt.Errorf("PCR %d: list them once each, in order", p)
		}
	}
	return nil
}

func selection(pcrs []int) tpm2.TPMLPCRSelection {
	idx := make([]uint, len(pcrs))
	for i, p := range pcrs {
		idx[i] = uint(p)
	}
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{
		Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(idx...),
	}}}
}

// pcrDigest is the SHA-256 of the PCRs' current values, in order, as
// PolicyPCR wants it.
func pcrDigest(tpm transport.TPM, pcrs []int) ([]byte, error) {
	h := sha256.New()
	// PCR_Read returns at most 8 values at a time; read one by one.
	for _, p := range pcrs {
		rsp, err := tpm2.PCRRead{PCRSelectionIn: selection([]int{p})}.Execute(tpm)
		if err != nil {
			return nil, fmt.Errorf("read PCR %d: %w", p, err)
		}
		if len(rsp.PCRValues.Digests) != 1 {
			return nil, fmt.Errorf("read PCR %d: the TPM has no SHA-256 bank for it", p)
		}
		h.Write(rsp.PCRValues.Digests[0].Buffer)
	}
	return h.Sum(nil), nil
}

// policyDigest is the policy a session satisfies by PolicyPCR over pcrs
// whose values hash to digest.
func policyDigest(pcrs []int, digest []byte) ([]byte, error) {
	calc, err := tpm2.NewPolicyCalculator(tpm2.TPMAlgSHA256)
	if err != nil {
		return nil, err
	}
	cmd := tpm2.PolicyPCR{PcrDigest: tpm2.TPM2BDigest{Buffer: digest}, Pcrs: selection(pcrs)}
	if err := cmd.Update(calc); err != nil {
		return nil, err
	}
	return calc.Hash().Digest, nil
}

// storageKey is the owner hierarchy's storage root key, derived again
// from the TPM's seed; the caller flushes it.
type storageKey struct {
	handle tpm2.TPMHandle
	name   tpm2.TPM2BName
	public tpm2.TPMTPublic
}

func createStorageKey(tpm transport.TPM) (*storageKey, error) {
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.TPMRHOwner,
		InPublic:      tpm2.New2B(tpm2.ECCSRKTemplate),
	}.Execute(tpm)
	if err != nil {
		return nil, fmt.Errorf("create the storage root key: %w", err)
	}
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		flush(tpm, rsp.ObjectHandle)
		return nil, fmt.Errorf("create the storage root key: %w", err)
	}
	return &storageKey{handle: rsp.ObjectHandle, name: rsp.Name, public: *pub}, nil
}

func flush(tpm transport.TPM, h tpm2.TPMHandle) {
	_, _ = tpm2.FlushContext{FlushHandle: h}.Execute(tpm) // a transient object; a reset drops it anyway
}

// Seal seals secret to tpm against the current values of pcrs (SHA-256
// bank).
func Seal(tpm transport.TPM, secret []byte, pcrs []int) (*Sealed, error) {
	if len(secret) == 0 || len(secret) > MaxSecret {
		return nil, fmt.Errorf("seal: a secret of %d bytes; it takes 1 to %d", len(secret), MaxSecret)
	}
	pcrs = slices.Clone(pcrs)
	if err := checkPCRs(pcrs); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	digest, err := pcrDigest(tpm, pcrs)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	policy, err := policyDigest(pcrs, digest)
	if err != nil {
		return nil, fmt.Errorf("seal: policy: %w", err)
	}
	srk, err := createStorageKey(tpm)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	defer flush(tpm, srk.handle)
	rsp, err := tpm2.Create{
		// The secret goes to the TPM encrypted, in a session salted
		// with the storage key.
		ParentHandle: tpm2.AuthHandle{
			Handle: srk.handle, Name: srk.name,
			Auth: tpm2.HMAC(tpm2.TPMAlgSHA256, 16, tpm2.AESEncryption(128, tpm2.EncryptIn), tpm2.Salted(srk.handle, srk.public)),
		},
		InSensitive: tpm2.TPM2BSensitiveCreate{Sensitive: &tpm2.TPMSSensitiveCreate{
			Data: tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: secret}),
		}},
		InPublic: tpm2.New2B(tpm2.TPMTPublic{
			Type:    tpm2.TPMAlgKeyedHash,
			NameAlg: tpm2.TPMAlgSHA256,
			ObjectAttributes: tpm2.TPMAObject{
				FixedTPM:    true,
				FixedParent: true,
				NoDA:        true,
			},
			AuthPolicy: tpm2.TPM2BDigest{Buffer: policy},
		}),
	}.Execute(tpm)
	if err != nil {
		return nil, fmt.Errorf("seal: create the sealed object: %w", err)
	}
	return &Sealed{
		PCRs:    pcrs,
		Policy:  policy,
		Public:  tpm2.Marshal(rsp.OutPublic),
		Private: tpm2.Marshal(rsp.OutPrivate),
	}, nil
}

// Unseal returns the secret s holds, which the TPM gives out only while
// its PCRs hold the values s was sealed against: otherwise ErrPolicy (and
// ErrOtherTPM for an object another TPM made).
func Unseal(tpm transport.TPM, s *Sealed) ([]byte, error) {
	pub, err := tpm2.Unmarshal[tpm2.TPM2BPublic](s.Public)
	if err != nil {
		return nil, fmt.Errorf("unseal: public: %w", err)
	}
	priv, err := tpm2.Unmarshal[tpm2.TPM2BPrivate](s.Private)
	if err != nil {
		return nil, fmt.Errorf("unseal: private: %w", err)
	}
	srk, err := createStorageKey(tpm)
	if err != nil {
		return nil, fmt.Errorf("unseal: %w", err)
	}
	defer flush(tpm, srk.handle)
	loaded, err := tpm2.Load{
		ParentHandle: tpm2.NamedHandle{Handle: srk.handle, Name: srk.name},
		InPrivate:    *priv,
		InPublic:     *pub,
	}.Execute(tpm)
	if err != nil {
		// The private part is bound to the storage key, which is bound
		// to the TPM's seed: another seed fails its integrity check.
		if isIntegrity(err) {
			return nil, fmt.Errorf("unseal: %w", ErrOtherTPM)
		}
		return nil, fmt.Errorf("unseal: load the sealed object: %w", err)
	}
	defer flush(tpm, loaded.ObjectHandle)
	sess, closeSession, err := tpm2.PolicySession(tpm, tpm2.TPMAlgSHA256, 16,
		tpm2.Salted(srk.handle, srk.public), tpm2.AESEncryption(128, tpm2.EncryptOut))
	if err != nil {
		return nil, fmt.Errorf("unseal: start a policy session: %w", err)
	}
	defer func() { _ = closeSession() }() // flushes the session; a failed flush leaks a slot only until reset
	if _, err := (tpm2.PolicyPCR{PolicySession: sess.Handle(), Pcrs: selection(s.PCRs)}).Execute(tpm); err != nil {
		return nil, fmt.Errorf("unseal: PolicyPCR: %w", err)
	}
	rsp, err := tpm2.Unseal{ItemHandle: tpm2.AuthHandle{Handle: loaded.ObjectHandle, Name: loaded.Name, Auth: sess}}.Execute(tpm)
	if err != nil {
		if isPolicyFail(err) {
			return nil, fmt.Errorf("unseal (PCRs %v): %w", s.PCRs, ErrPolicy)
		}
		return nil, fmt.Errorf("unseal: %w", err)
	}
	return rsp.OutData.Buffer, nil
}

// isPolicyFail: the session's policy digest is not the object's.
func isPolicyFail(err error) bool { return errors.Is(err, tpm2.TPMRCPolicyFail) }

// isIntegrity: the private part does not open under this parent.
func isIntegrity(err error) bool { return errors.Is(err, tpm2.TPMRCIntegrity) }
