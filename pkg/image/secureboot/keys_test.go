package secureboot

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGenerate(t *testing.T) {
	ks := newTestKeySet(t)

	fi, err := os.Stat(ks.Dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "key set directory")
	assert.Equal(t, testSite, ks.Site)
	u, err := uuid.Parse(ks.Owner.String())
	require.NoError(t, err)
	assert.Equal(t, uuid.Version(4), u.Version(), "owner GUID is random")

	seen := map[string]bool{}
	for _, r := range Roles() {
		t.Run(string(r), func(t *testing.T) {
			k := ks.Key(r)
			require.NotNil(t, k)
			assert.Equal(t, r, k.Role)
			fi, err := os.Stat(k.KeyFile)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "private key")
			fi, err = os.Stat(k.CertFile)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "certificate")

			c := k.Cert
			assert.Equal(t, x509.SHA256WithRSA, c.SignatureAlgorithm)
			assert.Equal(t, KeyBits, c.PublicKey.(*rsa.PublicKey).N.BitLen())
			assert.NoError(t, c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature), "self-signed")
			assert.Equal(t, c.RawSubject, c.RawIssuer)
			assert.Equal(t, testSite+" Secure Boot "+string(r), c.Subject.CommonName)
			assert.Equal(t, []string{testSite}, c.Subject.Organization)
			assert.Equal(t, Validity, c.NotAfter.Sub(c.NotBefore))
			assert.True(t, c.NotBefore.Before(testTime()), "valid at generation")
			assert.Equal(t, 1, c.SerialNumber.Sign())
			assert.False(t, seen[string(c.RawSubjectPublicKeyInfo)], "a key of its own")
			seen[string(c.RawSubjectPublicKeyInfo)] = true
		})
	}

	loaded, err := Load(ks.Dir, WithTime(testTime()))
	require.NoError(t, err)
	assert.Equal(t, ks.Owner, loaded.Owner)
	assert.Equal(t, ks.Site, loaded.Site)
	for _, r := range Roles() {
		assert.Equal(t, ks.Key(r).Cert.Raw, loaded.Key(r).Cert.Raw, r)
		assert.True(t, ks.Key(r).Private.Equal(loaded.Key(r).Private), r)
		assert.Equal(t, ks.Key(r).KeyFile, loaded.Key(r).KeyFile, r)
	}
}

func TestGenerateNeverReplaces(t *testing.T) {
	ks := newTestKeySet(t)
	before, err := os.ReadFile(ks.DB.KeyFile)
	require.NoError(t, err)

	_, err = Generate(ks.Dir, testSite)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "never replaced")
	after, err := os.ReadFile(ks.DB.KeyFile)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}

func TestGenerateSiteNames(t *testing.T) {
	for _, tc := range []struct {
		site string
		ok   bool
	}{
		{"plant-7", true},
		{"A.b_c-9", true},
		{strings.Repeat("x", 40), true},
		{"", false},
		{strings.Repeat("x", 41), false},
		{"-lead", false},
		{"two words", false},
		{"a/b", false},
		{"..", false},
		{"café", false},
	} {
		t.Run(tc.site, func(t *testing.T) {
			err := ValidSite(tc.site)
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			assert.Error(t, err)
			_, err = Generate(filepath.Join(t.TempDir(), "keys"), tc.site)
			assert.Error(t, err)
		})
	}
}

// writePEM replaces path with one PEM block.
func writePEM(t *testing.T, path, typ string, der []byte, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode))
	require.NoError(t, os.Chmod(path, mode))
}

func TestLoadProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, ks *KeySet)
		at    time.Time
		file  func(ks *KeySet) string // the file the error must name
		want  string                  // part of the message: the problem or the fix
	}{
		{
			name:  "missing key",
			spoil: func(t *testing.T, ks *KeySet) { require.NoError(t, os.Remove(ks.DB.KeyFile)) },
			file:  func(ks *KeySet) string { return ks.DB.KeyFile },
			want:  "restore the key set directory",
		},
		{
			name:  "missing certificate",
			spoil: func(t *testing.T, ks *KeySet) { require.NoError(t, os.Remove(ks.KEK.CertFile)) },
			file:  func(ks *KeySet) string { return ks.KEK.CertFile },
			want:  "no such file",
		},
		{
			name:  "missing owner GUID",
			spoil: func(t *testing.T, ks *KeySet) { require.NoError(t, os.Remove(filepath.Join(ks.Dir, OwnerFile))) },
			file:  func(ks *KeySet) string { return filepath.Join(ks.Dir, OwnerFile) },
			want:  "no such file",
		},
		{
			name: "bad owner GUID",
			spoil: func(t *testing.T, ks *KeySet) {
				require.NoError(t, os.WriteFile(filepath.Join(ks.Dir, OwnerFile), []byte("not-a-guid\n"), 0o644))
			},
			file: func(ks *KeySet) string { return filepath.Join(ks.Dir, OwnerFile) },
			want: "uuidgen",
		},
		{
			name:  "key readable by others",
			spoil: func(t *testing.T, ks *KeySet) { require.NoError(t, os.Chmod(ks.PK.KeyFile, 0o644)) },
			file:  func(ks *KeySet) string { return ks.PK.KeyFile },
			want:  "chmod 600",
		},
		{
			name: "key of another role",
			spoil: func(t *testing.T, ks *KeySet) {
				b, err := os.ReadFile(ks.KEK.KeyFile)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(ks.DB.KeyFile, b, 0o600))
			},
			file: func(ks *KeySet) string { return ks.DB.KeyFile },
			want: "not the key of",
		},
		{
			name: "one key for two roles",
			spoil: func(t *testing.T, ks *KeySet) {
				for _, p := range [][2]string{{ks.PK.KeyFile, ks.KEK.KeyFile}, {ks.PK.CertFile, ks.KEK.CertFile}} {
					b, err := os.ReadFile(p[0])
					require.NoError(t, err)
					require.NoError(t, os.WriteFile(p[1], b, 0o600))
				}
			},
			file: func(ks *KeySet) string { return ks.KEK.CertFile },
			want: "has the PK's key",
		},
		{
			name: "certificate not PEM",
			spoil: func(t *testing.T, ks *KeySet) {
				require.NoError(t, os.WriteFile(ks.DB.CertFile, ks.DB.Cert.Raw, 0o644))
			},
			file: func(ks *KeySet) string { return ks.DB.CertFile },
			want: "not a PEM certificate",
		},
		{
			name: "certificate garbled",
			spoil: func(t *testing.T, ks *KeySet) {
				writePEM(t, ks.DB.CertFile, "CERTIFICATE", []byte("garbage"), 0o644)
			},
			file: func(ks *KeySet) string { return ks.DB.CertFile },
			want: "x509",
		},
		{
			name: "encrypted key",
			spoil: func(t *testing.T, ks *KeySet) {
				writePEM(t, ks.KEK.KeyFile, "ENCRYPTED PRIVATE KEY", []byte("x"), 0o600)
			},
			file: func(ks *KeySet) string { return ks.KEK.KeyFile },
			want: "unencrypted",
		},
		{
			name: "RSA-4096",
			spoil: func(t *testing.T, ks *KeySet) {
				priv, err := rsa.GenerateKey(rand.Reader, 4096)
				require.NoError(t, err)
				der, err := x509.MarshalPKCS8PrivateKey(priv)
				require.NoError(t, err)
				writePEM(t, ks.DB.KeyFile, "PRIVATE KEY", der, 0o600)
			},
			file: func(ks *KeySet) string { return ks.DB.KeyFile },
			want: "RSA-2048",
		},
		{
			name: "expired",
			at:   testTime().Add(Validity),
			file: func(ks *KeySet) string { return ks.PK.CertFile },
			want: "make a new key set",
		},
		{
			name: "not yet valid",
			at:   testTime().Add(-24 * time.Hour),
			file: func(ks *KeySet) string { return ks.PK.CertFile },
			want: "clock",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks := newTestKeySet(t)
			if tc.spoil != nil {
				tc.spoil(t, ks)
			}
			at := tc.at
			if at.IsZero() {
				at = testTime()
			}
			_, err := Load(ks.Dir, WithTime(at))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrKeySet)
			assert.Contains(t, err.Error(), tc.file(ks)+": ", "names the file")
			assert.Contains(t, err.Error(), tc.want)
			if strings.HasPrefix(tc.name, "missing") {
				assert.ErrorIs(t, err, fs.ErrNotExist)
			}
		})
	}
}

// A key set made with openssl (PKCS#1 or PKCS#8 keys) loads, given the
// file names.
func TestLoadPKCS1Key(t *testing.T) {
	ks := newTestKeySet(t)
	writePEM(t, ks.KEK.KeyFile, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(ks.KEK.Private), 0o600)
	loaded, err := Load(ks.Dir, WithTime(testTime()))
	require.NoError(t, err)
	assert.True(t, ks.KEK.Private.Equal(loaded.KEK.Private))
}
