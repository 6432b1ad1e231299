package secureboot

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

func TestEnrollment(t *testing.T) {
	ks := newTestKeySet(t)
	extra := newTestKeySet(t) // stands in for a vendor's CA, e.g. Microsoft's UEFI CA
	vendor, err := efisig.ParseGUID(testOwnerStr)
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		opts    []EnrollOption
		wantDBs [][2]any // owner, certificate DER of each db entry
	}{
		{name: "site keys", wantDBs: [][2]any{{ks.Owner, ks.DB.Cert.Raw}}},
		{
			name:    "with a vendor's db certificate",
			opts:    []EnrollOption{WithExtraDB(ExtraCert{Owner: vendor, Cert: extra.DB.Cert})},
			wantDBs: [][2]any{{ks.Owner, ks.DB.Cert.Raw}, {vendor, extra.DB.Cert.Raw}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := ks.Enrollment(testTime(), tc.opts...)
			require.NoError(t, err)
			var names []string
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			assert.Equal(t, []string{"KEK.auth", "KEK.esl", "PK.auth", "PK.esl", "db.auth", "db.esl"}, names)

			for _, r := range Roles() {
				lists, err := efisig.ParseSignatureLists(files[ESLFile(r)])
				require.NoError(t, err, r)
				var got [][2]any
				for _, l := range lists {
					assert.Equal(t, efisig.EFICertX509(), l.Type)
					for _, s := range l.Signatures {
						got = append(got, [2]any{s.Owner, s.Data})
					}
				}
				want := [][2]any{{ks.Owner, ks.Key(r).Cert.Raw}}
				if r == DB {
					want = tc.wantDBs
				}
				assert.Equal(t, want, got, r)

				av, err := ParseAuthenticatedVariable(files[AuthFile(r)])
				require.NoError(t, err, r)
				assert.Equal(t, files[ESLFile(r)], av.Data, "%s.auth carries %s.esl", r, r)
				assert.Equal(t, NewEFITime(testTime()), av.Timestamp)
				signer := PK
				if r == DB {
					signer = KEK
				}
				assert.NoError(t, av.Verify(VariableOf(r), ks.Key(signer).Cert), "%s signed by %s", r, signer)
				for _, notSigner := range Roles() {
					if notSigner != signer {
						assert.ErrorIs(t, av.Verify(VariableOf(r), ks.Key(notSigner).Cert), ErrBadSignature, "%s not signed by %s", r, notSigner)
					}
				}
			}
		})
	}
}

func TestWriteEnrollment(t *testing.T) {
	ks := newTestKeySet(t)
	dir := filepath.Join(t.TempDir(), "loader", "keys", ks.Site)
	require.NoError(t, ks.WriteEnrollment(dir, testTime()))
	want, err := ks.Enrollment(testTime())
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, len(want))
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, b, got, name)
	}

	_, err = ks.Enrollment(testTime(), WithExtraDB(ExtraCert{}))
	assert.Error(t, err, "a nil certificate")
}
