package kubeadmflow

import (
	"context"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// readAheadPrograms are what a worker starts right after its wait for the
// API: the kubelet (84 MB), the runtime's shim and runc, and the CNI
// plugins. The slot is a compressed squashfs: a program's first start
// pages it in and decompresses it, and on a worker starved beside the init
// node that start is on the path to its Node (the kubelet's first log
// line comes tens of seconds after its exec: docs/benchmarks.md).
func readAheadPrograms(h *Flow) []string {
	paths := []string{layout.KubeletProgram, layout.ShimProgram, layout.RuncProgram}
	for _, p := range []string{"flannel", "bridge", "host-local", "loopback", "portmap"} {
		paths = append(paths, filepath.Join(layout.CNIPluginDir, p))
	}
	for i, p := range paths {
		paths[i] = h.Path(p)
	}
	return paths
}

// readAhead reads each file to its end into the page cache, until ctx
// ends, and returns how many bytes it read. A missing file is skipped: the
// warm-up is an optimisation only, never a reason to fail.
func readAhead(ctx context.Context, paths []string) int64 {
	var total int64
	buf := make([]byte, 1<<20)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		for ctx.Err() == nil {
			n, err := f.Read(buf)
			total += int64(n)
			if err != nil { // io.EOF, or a read error: done with it
				break
			}
		}
		_ = f.Close() // read only
		if ctx.Err() != nil {
			break
		}
	}
	return total
}

// whileReadingAhead runs fn while readAhead warms paths in the background,
// and stops the warm-up when fn returns.
func whileReadingAhead(ctx context.Context, paths []string, fn func() error) error {
	warmCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		readAhead(warmCtx, paths)
	}()
	defer func() {
		stop()
		<-done
	}()
	return fn()
}
