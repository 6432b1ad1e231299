package statecrypt

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

// newVolume is a LUKS2 volume made by the real cryptsetup in a file
// (formatting and tokens need no device mapper; opening does, so it is
// left to the QEMU test).
func newVolume(t *testing.T) (Volume, []byte) {
	t.Helper()
	_, err := exec.LookPath("cryptsetup")
	require.NoError(t, err, "cryptsetup not found: run make deps")
	dev := filepath.Join(t.TempDir(), "state.img")
	require.NoError(t, os.WriteFile(dev, nil, 0o600))
	require.NoError(t, os.Truncate(dev, 32<<20))
	v := Volume{Device: dev, Run: Exec{}}
	key := randomKey(t)
	require.NoError(t, v.Format(context.Background(), key, "TERRA-STATE"))
	return v, key
}

func TestFormatAndTokens(t *testing.T) {
	ctx := context.Background()
	v, key := newVolume(t)
	sealed := json.RawMessage(`{"pcrs":[7],"policy":"AQ=="}`)
	require.NoError(t, v.ImportToken(ctx, Token{Type: TokenTPM, Keyslots: []string{"0"}, Sealed: sealed}))
	require.NoError(t, v.AddKey(ctx, key, randomKey(t), 1))
	require.NoError(t, v.ImportToken(ctx, Token{Type: TokenRecovery, Keyslots: []string{"1"}, Escrow: "0123456789abcdef", Code: "abcd-efgh"}))

	h, err := v.Header()
	require.NoError(t, err)
	assert.Equal(t, "TERRA-STATE", h.Label)
	assert.Len(t, h.UUID, 36)
	assert.Equal(t, []string{"0", "1"}, h.Keyslots)
	tpm, ok := h.Find(TokenTPM)
	require.True(t, ok)
	assert.Equal(t, []string{"0"}, tpm.Keyslots)
	assert.JSONEq(t, string(sealed), string(tpm.Sealed))
	rec, ok := h.Find(TokenRecovery)
	require.True(t, ok)
	assert.Equal(t, []string{"1"}, rec.Keyslots)
	assert.Equal(t, "0123456789abcdef", rec.Escrow)
	assert.Equal(t, "abcd-efgh", rec.Code)
	_, ok = h.Find("systemd-tpm2")
	assert.False(t, ok)

	// cryptsetup agrees: both keys open their keyslots.
	out, err := exec.Command("cryptsetup", "luksDump", v.Device).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "terrarium-tpm2")
	assert.Contains(t, string(out), "terrarium-recovery")
	assert.Contains(t, string(out), "aes-xts-plain64")
	cmd := exec.Command("cryptsetup", "open", "--test-passphrase", "--key-file", "-", v.Device)
	cmd.Stdin = bytes.NewReader(key)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

func TestFormatRefusesAShortKey(t *testing.T) {
	v := Volume{Device: "/nonexistent", Run: Exec{}}
	err := v.Format(context.Background(), []byte("short"), "x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a key of 5 bytes, want 32")
}

func TestReadHeaderFallsBackToTheSecondaryCopy(t *testing.T) {
	v, _ := newVolume(t)
	f, err := os.OpenFile(v.Device, os.O_RDWR, 0)
	require.NoError(t, err)
	// Damage the primary header's JSON area.
	_, err = f.WriteAt([]byte("garbage"), 4096+10)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	h, err := v.Header()
	require.NoError(t, err)
	assert.Equal(t, "TERRA-STATE", h.Label)
}

func TestReadHeaderRefuses(t *testing.T) {
	v, _ := newVolume(t)
	good, err := os.ReadFile(v.Device)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		edit func([]byte) []byte
		want error
		text string
	}{
		"not LUKS":         {func(b []byte) []byte { return make([]byte, 64<<10) }, ErrNotLUKS2, ""},
		"short":            {func(b []byte) []byte { return b[:100] }, ErrNotLUKS2, "shorter than a header"},
		"LUKS1":            {func(b []byte) []byte { b[7] = 1; return b }, ErrNotLUKS2, "LUKS version 1"},
		"both copies bad":  {func(b []byte) []byte { b[4096+10] ^= 1; b[16384+4096+10] ^= 1; return b }, ErrMalformed, "checksum mismatch"},
		"primary size bad": {func(b []byte) []byte { b[15] = 3; b[16384+4096+10] ^= 1; return b }, ErrMalformed, "header size"},
	} {
		t.Run(name, func(t *testing.T) {
			b := tc.edit(bytes.Clone(good))
			_, err := ReadHeader(bytes.NewReader(b))
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
		})
	}
}

func TestIsLUKS(t *testing.T) {
	v, _ := newVolume(t)
	f, err := os.Open(v.Device)
	require.NoError(t, err)
	defer f.Close()
	ok, err := IsLUKS(f)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = IsLUKS(bytes.NewReader(make([]byte, 512)))
	require.NoError(t, err)
	assert.False(t, ok)
}

func FuzzReadHeader(f *testing.F) {
	// Seeds: a real header (its first 64 KiB) and a damaged copy.
	if _, err := exec.LookPath("cryptsetup"); err == nil {
		dir := f.TempDir()
		dev := filepath.Join(dir, "seed.img")
		if os.WriteFile(dev, nil, 0o600) == nil && os.Truncate(dev, 32<<20) == nil {
			cmd := exec.Command("cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-", dev)
			cmd.Stdin = bytes.NewReader(make([]byte, KeySize))
			if cmd.Run() == nil {
				b, _ := os.ReadFile(dev)
				f.Add(b[:64<<10])
			}
		}
	}
	f.Add([]byte(Magic + "\x00\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(bytes.NewReader(b))
		if err != nil {
			assert.True(t, errorsIsAny(err, ErrNotLUKS2, ErrMalformed), "unnamed error: %v", err)
			return
		}
		for _, id := range h.Keyslots {
			assert.NotEmpty(t, id)
		}
		assert.NotNil(t, h.Tokens)
	})
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
