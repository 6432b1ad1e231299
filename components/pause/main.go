// Command pause is the sandbox ("infra") container of every pod: it holds
// the pod's namespaces open and does nothing else. It does what the
// upstream C program does: it exits 0 on SIGINT or SIGTERM, reaps the
// zombies that are re-parented to it as PID 1, and otherwise sleeps.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause.go %s (Terrarium)\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %s\n", sig)
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
