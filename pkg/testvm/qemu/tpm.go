package qemu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// tpmStartTimeout bounds the wait for swtpm's socket.
const tpmStartTimeout = 10 * time.Second

// tpmProcess is a running swtpm.
type tpmProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has been reaped
}

// stop kills it (if it has not ended with QEMU) and reaps it.
func (p *tpmProcess) stop() {
	_ = p.cmd.Process.Kill() // gone already, or goes now
	<-p.done
}

// startTPM starts cfg's TPM 2.0, a swtpm whose state lives in
// Dir/TPMDir, and returns once it listens on Dir/TPMSocket for QEMU. It
// ends when QEMU disconnects (--terminate) or the test process dies.
func startTPM(cfg Config) (*tpmProcess, error) {
	bin, err := exec.LookPath("swtpm")
	if err != nil {
		return nil, fmt.Errorf("a TPM for the machine: %w (run make deps)", err)
	}
	state := filepath.Join(cfg.Dir, TPMDir)
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	sock := filepath.Join(cfg.Dir, TPMSocket)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	cmd := exec.Command(bin, "socket", "--tpm2", "--terminate",
		"--tpmstate", "dir="+state,
		"--ctrl", "type=unixio,path="+sock,
		"--log", "file="+filepath.Join(cfg.Dir, TPMLog)+",level=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start swtpm: %w", err)
	}
	p := &tpmProcess{cmd: cmd, done: make(chan struct{})}
	var waitErr error
	go func() {
		waitErr = cmd.Wait() // read only after done is closed
		close(p.done)
	}()
	for deadline := time.Now().Add(tpmStartTimeout); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(cfg.Dir, TPMLog)) // best effort: the error says what happened
			return nil, fmt.Errorf("swtpm exited before it listened (%w): %s", waitErr, log)
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("swtpm did not listen on %s within %s", sock, tpmStartTimeout)
		}
	}
}
