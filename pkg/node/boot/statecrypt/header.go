// Package statecrypt is TERRA-STATE's encryption: a LUKS2 volume
// (dm-crypt, made and opened by cryptsetup from the slot's root
// filesystem) whose volume key opens with a random key the machine's TPM
// seals (tpmseal) and, for the operator, with a recovery key. The sealed
// key lives in the volume's own LUKS2 header as a token, so the disk
// carries everything but the TPM's part.
//
// The header is read here in Go, not by cryptsetup: the initramfs needs
// only the token to unseal, and a header made by whoever held the disk is
// outside input, read with bounds and checked against its checksum.
package statecrypt

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Magic starts a LUKS header.
const Magic = "LUKS\xba\xbe"

// Header sizes LUKS2 allows (binary header and JSON area together): 16 KiB
// to 4 MiB, a power of two.
const (
	binaryHeaderSize = 4096
	minHeaderSize    = 16 << 10
	maxHeaderSize    = 4 << 20
)

// ErrNotLUKS2 means the device holds no LUKS2 header.
var ErrNotLUKS2 = errors.New("no LUKS2 header")

// ErrMalformed means a LUKS2 header is damaged or not one cryptsetup
// writes.
var ErrMalformed = errors.New("malformed LUKS2 header")

// Header is what a LUKS2 header says that Terrarium reads.
type Header struct {
	UUID  string
	Label string
	// Keyslots are the keyslots in use, by number.
	Keyslots []string
	// Tokens, by number.
	Tokens map[string]Token
}

// Token is a LUKS2 token: a keyslot's helper, stored in the header. Type
// names what it is; Terrarium's carry one more field each.
type Token struct {
	Type     string   `json:"type"`
	Keyslots []string `json:"keyslots"`
	// Sealed is a TokenTPM's key sealed by the TPM (tpmseal.Sealed's
	// JSON).
	Sealed json.RawMessage `json:"terrarium-sealed,omitempty"`
	// Escrow is, for a TokenRecovery whose key the cluster's escrow key
	// recovers, that key's ID (recoverykey.PublicKey.ID); empty for a key
	// shown once on the console.
	Escrow string `json:"terrarium-escrow,omitempty"`
	// Code is that node's recovery code (recoverykey.Code, as written for
	// a person): not secret, it gives the recovery key only with the
	// escrow's private half.
	Code string `json:"terrarium-code,omitempty"`
}

// Token types.
const (
	TokenTPM      = "terrarium-tpm2"
	TokenRecovery = "terrarium-recovery"
)

// Find returns the first token of type typ, by token number.
func (h *Header) Find(typ string) (Token, bool) {
	best := ""
	for id, t := range h.Tokens {
		if t.Type == typ && (best == "" || compareIDs(id, best) < 0) {
			best = id
		}
	}
	if best == "" {
		return Token{}, false
	}
	return h.Tokens[best], true
}

// All returns the numbers of the tokens of type typ, in order.
func (h *Header) All(typ string) []string {
	var ids []string
	for id, t := range h.Tokens {
		if t.Type == typ {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareIDs)
	return ids
}

// HasKeyslot tells whether keyslot slot is in use.
func (h *Header) HasKeyslot(slot string) bool { return slices.Contains(h.Keyslots, slot) }

// compareIDs orders the decimal numbers of keyslots and tokens.
func compareIDs(a, b string) int {
	if c := cmp.Compare(len(a), len(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// IsLUKS tells whether r starts with a LUKS header (of any version).
func IsLUKS(r io.ReaderAt) (bool, error) {
	b := make([]byte, len(Magic))
	if _, err := r.ReadAt(b, 0); err != nil {
		return false, fmt.Errorf("read the first bytes: %w", err)
	}
	return string(b) == Magic, nil
}

// ReadHeader reads the LUKS2 header at the start of r: the primary one,
// or the secondary copy when the primary is damaged.
func ReadHeader(r io.ReaderAt) (*Header, error) {
	h, err := readHeaderAt(r, 0)
	if err == nil || errors.Is(err, ErrNotLUKS2) {
		return h, err
	}
	// The secondary copy follows the primary one, at its size: try the
	// sizes a header can have.
	for off := int64(minHeaderSize); off <= maxHeaderSize; off *= 2 {
		if h2, err2 := readHeaderAt(r, off); err2 == nil {
			return h2, nil
		}
	}
	return nil, err
}

func readHeaderAt(r io.ReaderAt, off int64) (*Header, error) {
	bin := make([]byte, binaryHeaderSize)
	if _, err := r.ReadAt(bin, off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: shorter than a header", ErrNotLUKS2)
		}
		return nil, fmt.Errorf("read the LUKS header at %d: %w", off, err)
	}
	magic := Magic
	if off > 0 {
		magic = "SKUL\xba\xbe" // the secondary header's
	}
	if string(bin[:6]) != magic {
		return nil, ErrNotLUKS2
	}
	if v := binary.BigEndian.Uint16(bin[6:8]); v != 2 {
		return nil, fmt.Errorf("%w: LUKS version %d", ErrNotLUKS2, v)
	}
	size := binary.BigEndian.Uint64(bin[8:16])
	if size < minHeaderSize || size > maxHeaderSize || size&(size-1) != 0 {
		return nil, fmt.Errorf("%w: header size %d", ErrMalformed, size)
	}
	if got := binary.BigEndian.Uint64(bin[256:264]); got != uint64(off) {
		return nil, fmt.Errorf("%w: the header at %d says it is at %d", ErrMalformed, off, got)
	}
	if alg := cString(bin[72:104]); alg != "sha256" {
		return nil, fmt.Errorf("%w: checksum algorithm %q (cryptsetup writes sha256)", ErrMalformed, alg)
	}
	// The whole area must be there before it is read (and allocated).
	if _, err := r.ReadAt(make([]byte, 1), off+int64(size)-1); err != nil {
		return nil, fmt.Errorf("%w: a header of %d bytes at %d does not fit: %w", ErrMalformed, size, off, err)
	}
	all := make([]byte, size)
	copy(all, bin)
	if _, err := r.ReadAt(all[binaryHeaderSize:], off+binaryHeaderSize); err != nil {
		return nil, fmt.Errorf("%w: read the JSON area: %w", ErrMalformed, err)
	}
	want := make([]byte, sha256.Size)
	copy(want, all[448:448+sha256.Size])
	clear(all[448 : 448+64])
	if sum := sha256.Sum256(all); !bytes.Equal(sum[:], want) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrMalformed)
	}
	area := all[binaryHeaderSize:]
	if i := bytes.IndexByte(area, 0); i >= 0 {
		area = area[:i]
	}
	var meta struct {
		Keyslots map[string]json.RawMessage `json:"keyslots"`
		Tokens   map[string]Token           `json:"tokens"`
	}
	if err := json.Unmarshal(area, &meta); err != nil {
		return nil, fmt.Errorf("%w: JSON area: %w", ErrMalformed, err)
	}
	h := &Header{UUID: cString(bin[168:208]), Label: cString(bin[24:72]), Tokens: meta.Tokens}
	for id := range meta.Keyslots {
		h.Keyslots = append(h.Keyslots, id)
	}
	slices.SortFunc(h.Keyslots, compareIDs)
	if h.Tokens == nil {
		h.Tokens = map[string]Token{}
	}
	return h, nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.ToValidUTF8(string(b), "?")
}
