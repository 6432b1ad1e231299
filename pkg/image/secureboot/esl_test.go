package secureboot

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

// Our .esl is efitools' cert-to-efi-sig-list's, byte for byte, and
// sig-list-to-certs reads the certificate back out of it.
func TestSignatureListMatchesEfitools(t *testing.T) {
	ks := newTestKeySet(t)
	dir := t.TempDir()
	for _, r := range Roles() {
		t.Run(string(r), func(t *testing.T) {
			k := ks.Key(r)
			ours, err := efisig.X509SignatureList(ks.Owner, k.Cert).MarshalBinary()
			require.NoError(t, err)
			theirs := filepath.Join(dir, string(r)+".efitools.esl")
			runTool(t, nil, "cert-to-efi-sig-list", "-g", ks.Owner.String(), k.CertFile, theirs)
			want, err := os.ReadFile(theirs)
			require.NoError(t, err)
			assert.Equal(t, want, ours)

			esl := writeFile(t, dir, ESLFile(r), ours)
			prefix := filepath.Join(dir, string(r)+"-out")
			runTool(t, nil, "sig-list-to-certs", esl, prefix)
			der, err := os.ReadFile(prefix + "-0.der")
			require.NoError(t, err)
			assert.Equal(t, k.Cert.Raw, der)
		})
	}
}
