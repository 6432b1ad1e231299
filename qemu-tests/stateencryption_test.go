package qemutests

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
)

// TestStateEncryption: on a machine with a TPM 2.0 (swtpm, into which
// OVMF measures the boot), the first boot makes TERRA-STATE a LUKS2
// volume whose key the TPM seals against PCR 7 (a power cut while it does
// leaves a volume the next boot makes again), and provisions, adding a
// recovery key derived against the cluster's escrow key; the node's disk
// then holds nothing it stored in the clear (its admin's key, which a
// plain STATE holds: TestEnrollRebootChange); after a power cut the TPM
// unseals the key and the node verifies from its stored config; the same
// disk in another machine (another TPM) stays shut, the console says why
// and shows the node's recovery code; a wrong key is refused, the key
// `imagebuild config recovery-key` derives from the code opens it and
// reseals it to the new machine's TPM, which opens it at the next boot
// without a key.
func TestStateEncryption(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	m.tpm = true
	key := newSSHKey(t)
	// The cluster's secrets, as imagebuild config cluster makes them,
	// with their recovery escrow key.
	s, err := clustersecrets.Generate("plant-7", time.Now(), time.Hour, nil)
	require.NoError(t, err)
	secrets := filepath.Join(t.TempDir(), "secrets.yaml")
	require.NoError(t, clustersecrets.Save(secrets, s))
	escrow, err := s.RecoveryEscrow()
	require.NoError(t, err)
	cfg := m.configDisk("config.img", adminConfig("node-1", key.authorized, "state:\n  recoveryKey: "+escrow.Public().String()+"\n"))

	vm := m.boot(ctx, configAttached(cfg))
	expect(ctx, t, vm, `terrarium-init: encrypting TERRA-STATE /dev/vda\d+ \(LUKS2, its key sealed to this machine's TPM against the Secure Boot state, PCR 7; reason: new partition\)`)
	// A power cut while the first boot encrypts, before the sealed key
	// is stored (it is stored after the filesystem is made): the next
	// boot makes the volume again.
	expect(ctx, t, vm, `terrarium-init: encrypting TERRA-STATE /dev/vda\d+: the LUKS2 volume is open as /dev/mapper/terrarium-state; making its filesystem`)
	require.NoError(t, vm.Quit(ctx))
	vm = m.boot(ctx, configAttached(cfg))
	expect(ctx, t, vm, `terrarium-init: encrypting TERRA-STATE /dev/vda\d+ \(LUKS2, its key sealed to this machine's TPM against the Secure Boot state, PCR 7; reason: its creation was interrupted\)`)
	expect(ctx, t, vm, `terrarium: TERRA-STATE: encrypted \(LUKS2, its key sealed by this machine's TPM\)`)
	// To the line's end: the serial line may not have brought it all yet.
	made := expect(ctx, t, vm, `terrarium: TERRA-STATE's recovery key: made, derived against the cluster's escrow key (\S+); recovery code (\S+)\n`)
	assert.Equal(t, escrow.Public().ID(), made[1])
	code := made[2]
	s1 := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s1.State, "%+v", s1)
	assert.Equal(t, "tpm", s1.StateEncryption)
	require.NoError(t, vm.Quit(ctx)) // a power cut: nothing is shut down
	assert.False(t, fileContains(t, m.disk, []byte(key.authorized)), "the admin's key is on the disk in the clear")

	vm = m.boot(ctx)
	expect(ctx, t, vm, `terrarium-init: opened encrypted TERRA-STATE /dev/vda\d+ with the key this machine's TPM unsealed`)
	expect(ctx, t, vm, `TERRA-STATE's recovery key: derived against the cluster's escrow key `+escrow.Public().ID())
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
	expect(ctx, t, vm, `imagebuild config recovery-key --secrets secrets.yaml `+regexp.QuoteMeta(code))
	expect(ctx, t, vm, `the cluster's escrow key is `+escrow.Public().ID())
	assert.NotContains(t, vm.Console(), "terrarium: Terrarium", "the node ran without its STATE")

	// A wrong key is refused; the operator's opens and reseals.
	expect(ctx, t, vm, `TERRA-STATE recovery key \(try 1 of 5; empty to give up\): `)
	require.NoError(t, vm.SendConsole("0123-4567-89ab-cdef-0123-4567-89ab-cdef\r"))
	expect(ctx, t, vm, `that recovery key does not open TERRA-STATE /dev/vda\d+`)
	expect(ctx, t, vm, `TERRA-STATE recovery key \(try 2 of 5; empty to give up\): `)
	cmd := exec.CommandContext(ctx, filepath.Join(fixture(t, "TERRARIUM_BIN"), "imagebuild"), "config", "recovery-key", "--secrets", secrets, code)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "imagebuild config recovery-key --secrets %s %s: %s", secrets, code, stderr.String())
	recovery := strings.TrimSpace(string(out))
	require.NoError(t, vm.SendConsole(recovery+"\r"))
	expect(ctx, t, vm, `terrarium-init: opened encrypted TERRA-STATE /dev/vda\d+ with its recovery key`)
	expect(ctx, t, vm, `terrarium-init: resealed TERRA-STATE's key to this machine's TPM`)
	s3 := expectStatus(ctx, t, vm, "verified", "failed")
	require.Equal(t, "verified", s3.State, "%+v", s3)
	assert.NotContains(t, vm.Console(), recovery, "the recovery key was echoed")
	require.NoError(t, vm.Quit(ctx))

	// Resealed: the new machine's TPM opens it, no key asked.
	vm = other.boot(ctx)
	expect(ctx, t, vm, `terrarium-init: opened encrypted TERRA-STATE /dev/vda\d+ with the key this machine's TPM unsealed`)
	s4 := expectStatus(ctx, t, vm, "verified", "failed")
	require.Equal(t, "verified", s4.State, "%+v", s4)
	assert.NotContains(t, vm.Console(), "recovery key (try")
}

// fileContains tells whether the file at path holds needle. A qcow2
// overlay holds what the guest wrote as it was written.
func fileContains(t *testing.T, path string, needle []byte) bool {
	t.Helper()
	require.Less(t, len(needle), scanOverlap, "a needle longer than the chunks overlap")
	return fileMatches(t, path, regexp.MustCompile(regexp.QuoteMeta(string(needle))))
}

// scanOverlap is how far fileMatches's chunks overlap: longer than any
// match it looks for.
const scanOverlap = 256

// fileMatches tells whether re matches in the file at path, read in 64
// MiB chunks that overlap by scanOverlap bytes.
func fileMatches(t *testing.T, path string, re *regexp.Regexp) bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 0, 64<<20+scanOverlap)
	chunk := make([]byte, 64<<20)
	for {
		n, err := io.ReadFull(f, chunk)
		buf = append(buf, chunk[:n]...)
		if re.Match(buf) {
			return true
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false
		}
		require.NoError(t, err, "read %s", path)
		buf = append(buf[:0], buf[max(0, len(buf)-scanOverlap):]...)
	}
}
