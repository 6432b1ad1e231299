package qemutests

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStateEncryption: on a machine with a TPM 2.0 (swtpm, into which
// OVMF measures the boot), the first boot makes TERRA-STATE a LUKS2
// volume whose key the TPM seals against PCR 7, and provisions; the
// node's disk then holds nothing it stored in the clear (its admin's key,
// which a plain STATE holds: TestEnrollRebootChange); after a power cut
// the TPM unseals the key and the node verifies from its stored config;
// the same disk in another machine (another TPM) stays shut, and the
// console says why.
func TestStateEncryption(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	m.tpm = true
	key := newSSHKey(t)
	cfg := m.configDisk("config.img", adminConfig("node-1", key.authorized, ""))

	vm := m.boot(ctx, configAttached(cfg))
	expect(ctx, t, vm, `terrarium-init: encrypting TERRA-STATE /dev/vda\d+ \(LUKS2, its key sealed to this machine's TPM against the Secure Boot state, PCR 7; reason: new partition\)`)
	expect(ctx, t, vm, `terrarium: TERRA-STATE: encrypted \(LUKS2, its key sealed by this machine's TPM\)`)
	s1 := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s1.State, "%+v", s1)
	assert.Equal(t, "tpm", s1.StateEncryption)
	require.NoError(t, vm.Quit(ctx)) // a power cut: nothing is shut down
	assert.False(t, fileContains(t, m.disk, []byte(key.authorized)), "the admin's key is on the disk in the clear")

	vm = m.boot(ctx)
	expect(ctx, t, vm, `terrarium-init: opened encrypted TERRA-STATE /dev/vda\d+ with the key this machine's TPM unsealed`)
	s2 := expectStatus(ctx, t, vm, "verified", "failed")
	require.Equal(t, "verified", s2.State, "%+v", s2)
	assert.Equal(t, "node-1", s2.Hostname)
	assert.Equal(t, "tpm", s2.StateEncryption)
	require.NoError(t, vm.Quit(ctx))

	// The disk in another machine: the same firmware, another TPM.
	other := *m
	other.dir = t.TempDir()
	vm = other.boot(ctx)
	expect(ctx, t, vm, `TERRA-STATE's key was sealed by another TPM: the disk was moved from another machine, or this machine's TPM was cleared`)
	assert.NotContains(t, vm.Console(), "terrarium: Terrarium", "the node ran without its STATE")
}

// fileContains tells whether the file at path holds needle, read in
// chunks that overlap by the needle's length. A qcow2 overlay holds what
// the guest wrote as it was written.
func fileContains(t *testing.T, path string, needle []byte) bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := bufio.NewReaderSize(f, 4<<20)
	buf := make([]byte, 0, 8<<20)
	chunk := make([]byte, 4<<20)
	for {
		n, err := io.ReadFull(r, chunk)
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, needle) {
			return true
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false
		}
		require.NoError(t, err, "read %s", path)
		buf = append(buf[:0], buf[max(0, len(buf)-len(needle)):]...)
	}
}
