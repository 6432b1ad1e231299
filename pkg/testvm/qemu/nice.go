package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// SetNice sets the niceness of every thread of the running QEMU (its vCPU
// threads included), as Config.Nice set it at the start: a worker VM
// that yielded the host's cores to a forming control plane gets its
// share once the cluster has formed. Threads QEMU starts later inherit
// the niceness of the thread that starts them.
func (v *VM) SetNice(n int) error {
	select {
	case <-v.exited:
		return fmt.Errorf("set niceness %d: QEMU exited", n)
	default:
	}
	return setNiceAll(v.cmd.Process.Pid, n)
}

// setNiceAll sets the niceness of each thread of process pid: on Linux,
// setpriority(PRIO_PROCESS) applies to one thread. A thread that one not
// yet reniced starts meanwhile keeps the old niceness, so the threads are
// listed again until a listing shows none not done, at most nicePasses
// times (by then every thread listed runs at n, and the threads they
// start inherit it).
func setNiceAll(pid, n int) error {
	done := map[int]bool{}
	for range nicePasses {
		tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if err != nil {
			return fmt.Errorf("set niceness %d: the threads of %d: %w", n, pid, err)
		}
		more := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			more = true
			// A thread that ended since the listing is no error.
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil && err != syscall.ESRCH {
				return fmt.Errorf("set niceness %d of thread %d of %d: %w", n, tid, pid, err)
			}
			done[tid] = true
		}
		if !more {
			break
		}
	}
	return nil
}

// nicePasses bounds setNiceAll's listings of a process's threads.
const nicePasses = 10
