package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/containerd/v2/core/snapshots"
	"google.golang.org/grpc"
)

// Serve serves sn to containerd as a proxy snapshotter on the unix socket
// at path until ctx ends; ready is called once it listens (sd_notify).
func Serve(ctx context.Context, sn snapshots.Snapshotter, path string, ready func() error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the old socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	srv := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(srv, snapshotservice.FromSnapshotter(sn))
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			srv.GracefulStop()
		case <-done:
		}
	}()
	if ready != nil {
		if err := ready(); err != nil {
			srv.Stop()
			return err
		}
	}
	if err := srv.Serve(ln); err != nil && ctx.Err() == nil {
		return fmt.Errorf("serve the snapshotter on %s: %w", path, err)
	}
	return nil
}
