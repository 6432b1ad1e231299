package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
)

// TestSecureBootKeysAndEnrollment: the key set the command makes loads,
// is never replaced, and its enrollment files parse and carry the
// certificates.
func TestSecureBootKeysAndEnrollment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	run := func(args ...string) (string, error) {
		cmd := secureBootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run("keys", "--site", "plant-7", "--out", dir)
	require.NoError(t, err, out)
	assert.Contains(t, out, "secureBoot: {keys: "+dir+"}")
	ks, err := secureboot.Load(dir)
	require.NoError(t, err)
	assert.Equal(t, "plant-7", ks.Site)

	_, err = run("keys", "--site", "plant-7", "--out", dir)
	require.ErrorContains(t, err, "never replaced", "a second key set into the same directory")
	again, err := secureboot.Load(dir)
	require.NoError(t, err)
	assert.True(t, again.Key(secureboot.DB).Cert.Equal(ks.Key(secureboot.DB).Cert), "the first key set is kept")

	_, err = run("keys", "--site", "no spaces allowed", "--out", filepath.Join(t.TempDir(), "k"))
	require.Error(t, err)

	enroll := filepath.Join(t.TempDir(), "enroll")
	out, err = run("enrollment", "--keys", dir, "--out", enroll)
	require.NoError(t, err, out)
	assert.Contains(t, out, "enroll db, then KEK, then PK")
	for _, r := range secureboot.Roles() {
		der, err := os.ReadFile(filepath.Join(enroll, string(r)+".der"))
		require.NoError(t, err)
		assert.Equal(t, ks.Key(r).Cert.Raw, der, "%s.der", r)
		esl, err := os.ReadFile(filepath.Join(enroll, secureboot.ESLFile(r)))
		require.NoError(t, err)
		lists, err := efisig.ParseSignatureLists(esl)
		require.NoError(t, err, "%s.esl", r)
		require.Len(t, lists, 1)
		auth, err := os.ReadFile(filepath.Join(enroll, secureboot.AuthFile(r)))
		require.NoError(t, err)
		_, err = secureboot.ParseAuthenticatedVariable(auth)
		require.NoError(t, err, "%s.auth", r)
	}

	_, err = run("enrollment", "--keys", t.TempDir(), "--out", enroll)
	require.ErrorContains(t, err, "load Secure Boot keys", "an empty directory is no key set")
}
