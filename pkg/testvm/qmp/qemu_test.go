package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startQEMU starts a QEMU without a machine (no firmware, no guest: well
// under a second of CPU) serving QMP on a socket in a temporary directory.
// It returns the socket's path, the process, and a channel that yields
// QEMU's exit.
func startQEMU(t *testing.T) (string, *os.Process, <-chan error) {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	require.NoError(t, err, "qemu-system-x86_64 not found: run `make deps` to install QEMU")
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	cmd := exec.Command(bin, "-machine", "none", "-nodefaults", "-display", "none",
		"-qmp", "unix:"+sock+",server=on,wait=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(done)
		exited <- err
	}()
	t.Cleanup(func() {
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("kill QEMU: %v", err)
		}
		<-done
		if t.Failed() {
			t.Logf("QEMU stderr:\n%s", stderr.String())
		}
	})
	return sock, cmd.Process, exited
}

func TestRealQEMU(t *testing.T) {
	sock, _, exited := startQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := Dial(ctx, sock, WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()

	// A typed answer, and the greeting read at Dial agrees with it.
	var ver struct {
		QEMU struct {
			Major, Minor, Micro int
		} `json:"qemu"`
		Package string `json:"package"`
	}
	require.NoError(t, c.Execute(ctx, "query-version", nil, &ver))
	g := c.Greeting()
	assert.Positive(t, ver.QEMU.Major)
	assert.Equal(t, Version{Major: ver.QEMU.Major, Minor: ver.QEMU.Minor, Micro: ver.QEMU.Micro, Package: ver.Package}, g.Version)
	t.Logf("QEMU %s", g.Version)

	type status struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	var st status
	require.NoError(t, c.Execute(ctx, "query-status", nil, &st))
	assert.Equal(t, status{Status: "running", Running: true}, st)

	// An event: stop answers, then QEMU announces STOP.
	require.NoError(t, c.Execute(ctx, "stop", nil, nil))
	ev, err := c.WaitEvent(ctx, "STOP")
	require.NoError(t, err)
	assert.False(t, ev.Timestamp.IsZero(), "STOP has QEMU's timestamp")
	require.NoError(t, c.Execute(ctx, "query-status", nil, &st))
	assert.Equal(t, status{Status: "paused"}, st)

	// QEMU rejects a command: a Go error naming the command and QEMU's reason.
	err = c.Execute(ctx, "device_del", map[string]string{"id": "no-such-device"}, nil)
	var qe *Error
	require.ErrorAs(t, err, &qe)
	assert.ErrorContains(t, err, "qmp device_del: ")
	assert.Contains(t, qe.Desc, "no-such-device")
	require.NoError(t, c.Execute(ctx, "cont", nil, nil), "connection usable after an error")
	_, err = c.WaitEvent(ctx, "RESUME")
	require.NoError(t, err)

	// quit: SHUTDOWN with its data, then QEMU closes the connection and exits.
	require.NoError(t, c.Execute(ctx, "quit", nil, nil))
	ev, err = c.WaitEvent(ctx, "SHUTDOWN")
	require.NoError(t, err)
	var data struct {
		Guest  bool   `json:"guest"`
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal(ev.Data, &data))
	assert.Equal(t, "host-qmp-quit", data.Reason)
	assert.False(t, data.Guest)
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("connection not closed after quit")
	}
	require.ErrorIs(t, c.Err(), ErrClosed)
	require.ErrorIs(t, c.Execute(ctx, "query-status", nil, nil), ErrClosed)
	select {
	case err := <-exited:
		require.NoError(t, err, "QEMU's exit")
	case <-ctx.Done():
		t.Fatal("QEMU did not exit after quit")
	}
	require.NoError(t, c.Close())
}

func TestRealQEMUDisconnect(t *testing.T) {
	sock, _, exited := startQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := Dial(ctx, sock, WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, c.Execute(ctx, "query-status", nil, nil))
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Execute(ctx, "query-status", nil, nil), ErrClosed)

	// QEMU outlives the client and takes a new connection.
	c, err = Dial(ctx, sock)
	require.NoError(t, err)
	defer c.Close()
	var st struct{ Status string }
	require.NoError(t, c.Execute(ctx, "query-status", nil, &st))
	assert.Equal(t, "running", st.Status)
	select {
	case err := <-exited:
		t.Fatalf("QEMU exited after the client disconnected: %v", err)
	default:
	}
}

func TestRealQEMUKilled(t *testing.T) {
	sock, proc, exited := startQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock, WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()

	// A context ends a wait for an event that does not come.
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	_, err = c.WaitEvent(wctx, "DEVICE_DELETED")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// So does the end of the connection: QEMU killed with a wait pending.
	waited := make(chan error, 1)
	go func() {
		_, err := c.WaitEvent(ctx, "DEVICE_DELETED")
		waited <- err
	}()
	require.NoError(t, proc.Kill())
	require.Error(t, <-exited, "QEMU was killed")
	select {
	case err := <-waited:
		require.ErrorIs(t, err, ErrClosed)
	case <-ctx.Done():
		t.Fatal("WaitEvent did not return after QEMU was killed")
	}
	<-c.Done()
	require.ErrorIs(t, c.Execute(ctx, "query-status", nil, nil), ErrClosed)
}
