package qemutests

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// sshKey is a throwaway admin key: the machine config authorizes it, the
// test logs in with it through a QEMU hostfwd port, as an operator would.
type sshKey struct {
	signer     ssh.Signer
	authorized string
	private    []byte // OpenSSH PEM, for a person inspecting a running test
}

func newSSHKey(t testing.TB) sshKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "qemu-test")
	if err != nil {
		t.Fatal(err)
	}
	return sshKey{signer: signer, authorized: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " qemu-test", private: pem.EncodeToMemory(block)}
}

// save writes the private key into dir for a person watching a long run
// from inside, and returns its path.
func (k sshKey) save(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "admin.key")
	if err := os.WriteFile(path, k.private, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// forwardSSH makes the machine's SSH reachable on a local port.
func (m *machine) forwardSSH() int {
	port := freePort(m.t)
	m.forward = append(m.forward, fmt.Sprintf("tcp:127.0.0.1:%d-:22", port))
	return port
}

type sshClient struct {
	t testing.TB
	c *ssh.Client
	// seq numbers sudoTry's files.
	seq int
}

// dialSSH logs in as admin, retrying while sshd starts.
func dialSSH(ctx context.Context, t testing.TB, port int, key sshKey) *sshClient {
	t.Helper()
	s, err := trySSH(ctx, t, port, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// trySSH is dialSSH for goroutines other than the test's: it returns the
// error instead of failing the test.
func trySSH(ctx context.Context, t testing.TB, port int, key sshKey) (*sshClient, error) {
	return trySSHAs(ctx, t, port, key, "admin")
}

// trySSHAs logs in as user.
func trySSHAs(ctx context.Context, t testing.TB, port int, key sshKey, user string) (*sshClient, error) {
	cfg := &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(key.signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a fresh VM's host key is new by definition
		Timeout:         20 * time.Second,
	}
	var last error
	for ctx.Err() == nil {
		c, err := ssh.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), cfg)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() }) // the VM may be gone by then: nothing to report
			return &sshClient{t: t, c: c}, nil
		}
		last = err
		time.Sleep(2 * time.Second)
	}
	return nil, fmt.Errorf("ssh %s@127.0.0.1:%d: %w", user, port, errors.Join(last, ctx.Err()))
}

// run executes cmd, failing the test on a non-zero exit.
func (s *sshClient) run(cmd string) string {
	s.t.Helper()
	out, err := s.try(cmd)
	if err != nil {
		s.t.Fatalf("ssh %q: %v\n%s", cmd, err, out)
	}
	return out
}

// retry runs an idempotent cmd (a kubectl apply, a wait) until it exits
// 0, up to 5 times, failing the test with the last answer: an emulated
// API server under load now and then lets a request time out
// (kubectl's openapi download for its validation, a TLS handshake).
func (s *sshClient) retry(cmd string) string {
	s.t.Helper()
	var (
		out string
		err error
	)
	for try := 0; try < 5; try++ {
		if out, err = s.try(cmd); err == nil {
			return out
		}
		s.t.Logf("ssh %q failed (%v), try %d of 5:\n%s", cmd, err, try+1, out)
		time.Sleep(time.Duration(try+1) * 5 * time.Second)
	}
	s.t.Fatalf("ssh %q: %v\n%s", cmd, err, out)
	return out
}

func (s *sshClient) try(cmd string) (string, error) {
	sess, err := s.c.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	// A terminal, as an operator has: Debian's sudo runs commands on a pty
	// of its own (use_pty) and, without one on our side, output written
	// after it exits can be lost.
	if err := sess.RequestPty("xterm", 50, 200, ssh.TerminalModes{ssh.ECHO: 0}); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	sess.Stdout, sess.Stderr = &buf, &buf
	err = sess.Run(cmd)
	return buf.String(), err
}

// read runs cmd without a terminal: for commands that need no sudo, whose
// output then comes through a pipe that sshd drains before it reports the
// exit (a short command's output through a pty can be lost, and on a
// starved one-vCPU guest it was, five reads in a row).
func (s *sshClient) read(cmd string) (string, error) {
	sess, err := s.c.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	return string(out), err
}

// sudoTry runs cmd as root with its output and exit status written to
// files on the guest, and reads them back through a pipe: an assertion on a command's failure
// output cannot rely on the pty, through which sudo's relayed output is
// now and then lost (TestPeerPull once read "" for a refused pull).
func (s *sshClient) sudoTry(cmd string) (string, error) {
	s.t.Helper()
	s.seq++
	out, rc := fmt.Sprintf("/tmp/ssh-out.%d", s.seq), fmt.Sprintf("/tmp/ssh-rc.%d", s.seq)
	quoted := strings.ReplaceAll(cmd, "'", `'\''`)
	// The braces send every command of a list to the file, not only the
	// last (a critical chain before a blame, in bench-cluster, went to
	// the pty and was lost).
	s.run(fmt.Sprintf("sudo sh -c '{ %s\n} >%s 2>&1; echo $? >%s; chmod 644 %s %s'", quoted, out, rc, out, rc))
	b, err := s.read("cat " + out)
	if err != nil {
		return b, fmt.Errorf("read %s: %w", out, err)
	}
	status, err := s.read("cat " + rc)
	if err != nil {
		return b, fmt.Errorf("read %s: %w", rc, err)
	}
	if st := strings.TrimSpace(status); st != "0" {
		return b, fmt.Errorf("%s exited with status %s", cmd, st)
	}
	return b, nil
}

// output runs cmd until it succeeds with output that matches complete
// (up to 5 times) and returns the last output. Debian's sudo relays a
// command's output through a pty of its own (use_pty), and now and then
// the output of a short command is lost on the way; and a busy API server
// under TCG now and then lets a kubectl's TLS handshake time out. A
// command whose output is asserted on is therefore run until its output
// is whole (e.g. shows its header). A command that really fails, or
// prints something else, does so at every try: the test fails with the
// last answer.
func (s *sshClient) output(cmd string, complete *regexp.Regexp) string {
	s.t.Helper()
	var (
		out string
		err error
	)
	for try := 0; try < 5; try++ {
		c := strings.ReplaceAll(cmd, "{try}", fmt.Sprint(try))
		out, err = s.try(c)
		if err == nil && complete.MatchString(out) {
			return out
		}
		time.Sleep(time.Duration(try+1) * 2 * time.Second)
	}
	if err != nil {
		s.t.Fatalf("ssh %q: %v\n%s", cmd, err, out)
	}
	return out
}
