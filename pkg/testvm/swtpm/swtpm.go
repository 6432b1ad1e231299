// Package swtpm runs a real software TPM 2.0 for a test: Debian's swtpm,
// which QEMU also uses as a VM's TPM, over a Unix socket.
package swtpm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/stretchr/testify/require"
)

// TPM is a running swtpm serving one test; it implements
// transport.TPM.
type TPM struct {
	conn net.Conn
	// Stop ends it (its state stays in its directory); the test's
	// cleanup does too.
	Stop func()
}

// Start starts a swtpm whose state lives in dir (a new one when dir is
// ""), started up and ready for commands. It fails (never skips) when
// swtpm is not installed.
func Start(t testing.TB, dir string) *TPM {
	t.Helper()
	bin, err := exec.LookPath("swtpm")
	require.NoError(t, err, "swtpm not found: run make deps")
	if dir == "" {
		dir = t.TempDir()
	}
	// A socket path must stay under 108 bytes: t.TempDir's may not.
	sockDir, err := os.MkdirTemp("", "swtpm")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "tpm.sock")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "socket", "--tpm2",
		"--tpmstate", "dir="+dir,
		"--server", "type=unixio,path="+sock,
		"--ctrl", "type=unixio,path="+filepath.Join(sockDir, "ctrl.sock"),
		"--flags", "not-need-init,startup-clear")
	var stderr bytes.Buffer // "Data client disconnected" on every close: shown only on failure
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	stop := sync.OnceFunc(func() {
		cancel()
		_ = cmd.Wait() // killed
	})
	t.Cleanup(stop)
	var conn net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			stop() // its stderr is complete, and ours to read, once it is gone
			require.FailNow(t, "swtpm did not listen", "%s: %v\n%s", sock, err, stderr.String())
		}
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &TPM{conn: conn, Stop: stop}
}

// Send implements transport.TPM: a command out, its whole response back
// (the header says how long it is).
func (s *TPM) Send(cmd []byte) ([]byte, error) {
	if _, err := s.conn.Write(cmd); err != nil {
		return nil, err
	}
	hdr := make([]byte, 10)
	if _, err := io.ReadFull(s.conn, hdr); err != nil {
		return nil, fmt.Errorf("read response header: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[2:6])
	if size < 10 || size > 1<<16 {
		return nil, errors.New("response of impossible size")
	}
	rsp := make([]byte, size)
	copy(rsp, hdr)
	if _, err := io.ReadFull(s.conn, rsp[10:]); err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	return rsp, nil
}

var _ transport.TPM = (*TPM)(nil)

// Extend measures data into pcr (its SHA-256 bank), as firmware does.
func (s *TPM) Extend(t testing.TB, pcr int, data string) {
	t.Helper()
	d := sha256.Sum256([]byte(data))
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests: tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{
			HashAlg: tpm2.TPMAlgSHA256, Digest: d[:],
		}}},
	}.Execute(s)
	require.NoError(t, err)
}
