package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
)

// The operator gets a node's recovery key from the code its console shows
// and the cluster's secrets file; a mistyped code is refused.
func TestRecoveryKey(t *testing.T) {
	dir := t.TempDir()
	s, err := clustersecrets.Generate("plant-7", time.Now(), time.Hour, nil)
	require.NoError(t, err)
	secrets := filepath.Join(dir, "secrets.yaml")
	require.NoError(t, clustersecrets.Save(secrets, s))
	e, err := s.RecoveryEscrow()
	require.NoError(t, err)
	key, code, err := e.Public().Seal() // as the node does
	require.NoError(t, err)

	run := func(args ...string) (string, error) {
		cmd := recoveryKeyCmd()
		cmd.SetArgs(args)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		return strings.TrimSpace(out.String()), err
	}
	got, err := run("--secrets", secrets, code.String())
	require.NoError(t, err)
	assert.Equal(t, key.String(), got)
	// Typed in pieces, as a shell splits it.
	got, err = run(append([]string{"--secrets", secrets}, strings.Split(code.String(), "-")...)...)
	require.NoError(t, err)
	assert.Equal(t, key.String(), got)

	_, err = run("--secrets", secrets, "aaaa"+code.String()[4:])
	assert.ErrorContains(t, err, "mistyped")
	_, err = run(code.String())
	assert.ErrorContains(t, err, "give --secrets")
}
