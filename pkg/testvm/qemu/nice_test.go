package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// niceOf reads a thread's niceness from /proc (stat's 19th field).
func niceOf(t *testing.T, pid, tid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid), "stat"))
	require.NoError(t, err)
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.Atoi(fields[16])
	require.NoError(t, err)
	return n
}

// threadsOf lists the threads of process pid.
func threadsOf(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	require.NoError(t, err)
	var tids []int
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		require.NoError(t, err)
		tids = append(tids, tid)
	}
	return tids
}

// TestNiceHelperProcess is the process TestSetNiceAll renices: this test
// binary again, idle, with the Go runtime's threads.
func TestNiceHelperProcess(t *testing.T) {
	if os.Getenv("TERRARIUM_NICE_HELPER") != "1" {
		return
	}
	time.Sleep(time.Minute)
}

// Every thread of a process gets the niceness, not its first alone.
func TestSetNiceAll(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestNiceHelperProcess$")
	cmd.Env = append(os.Environ(), "TERRARIUM_NICE_HELPER=1")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	var tids []int
	for deadline := time.Now().Add(10 * time.Second); len(tids) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tids = threadsOf(t, pid)
	}
	require.Greater(t, len(tids), 1, "a Go program runs several threads")
	now := niceOf(t, pid, pid)
	require.LessOrEqual(t, now, 14, "the helper runs at niceness %d: run this test below 15, so that 5 more is a niceness (at most 19)", now)
	want := now + 5
	require.NoError(t, setNiceAll(pid, want))
	for _, tid := range threadsOf(t, pid) {
		assert.Equal(t, want, niceOf(t, pid, tid), "thread %d", tid)
	}
	assert.ErrorContains(t, setNiceAll(1<<30, 0), "the threads of")
}
