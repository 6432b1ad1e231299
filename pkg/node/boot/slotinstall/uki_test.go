package slotinstall

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/authenticode"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// hostSDBoot is the build host's systemd-boot (make deps installs
// systemd-boot-efi): a real PE image to sign as a stand-in UKI.
const hostSDBoot = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"

type dbKey struct {
	key  *rsa.PrivateKey
	cert *x509.Certificate
}

func newDBKey(t *testing.T, name string) dbKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return dbKey{key: key, cert: cert}
}

// signedUKIs are both slots' stand-in UKIs signed by k.
func signedUKIs(t *testing.T, k dbKey) map[layout.Slot][]byte {
	t.Helper()
	pe, err := os.ReadFile(hostSDBoot)
	require.NoError(t, err, "systemd-boot: run make deps")
	out := map[layout.Slot][]byte{}
	for _, slot := range layout.Slots() {
		b, err := authenticode.Sign(pe, k.key, k.cert)
		require.NoError(t, err)
		out[slot] = b
	}
	return out
}

// secureBootImage turns n into a Secure Boot image's node: slot A's entry
// starts its signed UKI, and the ESP has no bare kernel.
func secureBootImage(t *testing.T, n *node, uki []byte) {
	t.Helper()
	n.write(layout.ESPEntriesDir+"/"+layout.SlotA.EntryFile(0), "title Terrarium 0.1.0 (slot a)\nversion 0.1.0\nsort-key terrarium-1\nefi /terrarium/a/terrarium.efi\n")
	require.NoError(t, os.Remove(espPath(n.esp, layout.SlotA.KernelPath())))
	require.NoError(t, os.Remove(espPath(n.esp, layout.SlotA.InitrdPath())))
	n.write(layout.SlotA.UKIPath(), string(uki))
}

// TestInstallSignedUKI: on a node that boots signed UKIs, Install writes
// the target slot's UKI and an entry that starts it, once the UKI checks
// against the firmware's db; a UKI signed by another key, an upgrade
// without UKIs, or a db it cannot read are refused before anything is
// written.
func TestInstallSignedUKI(t *testing.T) {
	site, stranger := newDBKey(t, "plant-7 db"), newDBKey(t, "stranger db")
	good := newBuild("0.2.0")
	good.ukis = signedUKIs(t, site)
	foreign := newBuild("0.2.0")
	foreign.ukis = signedUKIs(t, stranger)
	bare := newBuild("0.2.0")
	dbOf := func(certs ...*x509.Certificate) func() ([]*x509.Certificate, error) {
		return func() ([]*x509.Certificate, error) { return certs, nil }
	}
	tests := []struct {
		name    string
		b       build
		db      func() ([]*x509.Certificate, error)
		want    error
		message string
	}{
		{name: "signed by the site's db", b: good, db: dbOf(stranger.cert, site.cert)},
		{name: "signed by another key", b: foreign, db: dbOf(site.cert), want: ErrUntrustedUKI, message: "db holds plant-7 db"},
		{name: "no UKIs", b: bare, db: dbOf(site.cert), want: ErrNeedsSignedUKI, message: "starts /terrarium/a/terrarium.efi"},
		{name: "db not readable", b: good, want: ErrUntrustedUKI, message: "not readable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := image(t, newBuild("0.1.0"))
			secureBootImage(t, n, good.ukis[layout.SlotA])
			n.builds[tt.b.version] = tt.b
			o := n.options(tt.b.verified(t))
			o.FirmwareDB = tt.db
			before := n.snapshot()
			res, err := Install(context.Background(), o)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
				assert.Contains(t, err.Error(), tt.message)
				assert.Equal(t, before, n.snapshot(), "nothing written")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{layout.SlotB.UKIPath(), "loader/entries/terrarium-b+3.conf"}, res.Files)
			assert.Equal(t, string(good.ukis[layout.SlotB]), n.read(layout.SlotB.UKIPath()))
			entry := n.read("loader/entries/terrarium-b+3.conf")
			assert.Contains(t, entry, "\nefi /terrarium/b/terrarium.efi\n")
			assert.NotContains(t, entry, "linux")
			assert.NotContains(t, entry, "options")
			assert.NoFileExists(t, espPath(n.esp, layout.SlotB.KernelPath()))
			assert.Contains(t, strings.Join(n.reports.all(), "\n"), "slot b's UKI is signed by plant-7 db")
		})
	}
}
