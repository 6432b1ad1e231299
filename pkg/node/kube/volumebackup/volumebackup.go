// Package volumebackup carries a node's local volumes (the local-path
// StorageClass's volume area, pkg/node/kube/localvolumes) in its backups,
// when its config opts in (cluster.backup.volumesPassphrase): Write puts
// an encrypted copy of every volume on a TERRA-BACKUP stick
// (pkg/contract/backup's volume backup), and Restore fills a new node's
// empty area from the newest copy of its name before the kubelet starts a
// pod on it.
//
// The copy is taken file by file while the pods run, as a file-level
// backup of a running application is (restic, Velero's file system
// backup): each file is whole as it was when its copy began, but a
// database that writes several files at once should be stopped, or dump
// itself, for a consistent copy (docs/operations/backup.md).
package volumebackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// ErrNotEnabled says the node's backups carry no volumes.
var ErrNotEnabled = errors.New("this node's backups carry no volumes (its config has no cluster.backup.volumesPassphrase; make the configs with imagebuild config cluster --backup-volumes)")

// ErrNoArea says the node has no volume area to back up.
var ErrNoArea = errors.New("this node has no volume area (the cluster has no local storage, or TERRA-STATE had no room for one)")

// Enabled reports whether c opts the node's volumes into its backups.
func Enabled(c *machineconfig.Config) bool {
	return c != nil && c.Cluster.VolumesBackupPassphrase() != ""
}

// Result is what Write wrote.
type Result struct {
	// Path is the backup file, Size its size in bytes.
	Path string
	Size int64
	// Volumes is how many volumes it holds.
	Volumes int
	backup.VolumesWritten
}

func (r Result) String() string {
	s := fmt.Sprintf("%s (%d KiB) of %d volumes, %d files", r.Path, r.Size>>10, r.Volumes, r.Files)
	if r.Changed > 0 {
		s += fmt.Sprintf(", %d of them written to while copied", r.Changed)
	}
	return s
}

// Option tunes Write.
type Option func(*options)

type options struct {
	space   diskspace.FS
	reserve uint64
}

// WithSpace makes Write ask fs for free space (nil: the kernel's) and
// keep reserve bytes free when it writes onto TERRA-STATE.
func WithSpace(fs diskspace.FS, reserve uint64) Option {
	return func(o *options) { o.space, o.reserve = fs, reserve }
}

// Write writes an encrypted backup of every volume in the node's volume
// area into dir (a path under the host's root: a mounted stick, or a
// directory of the node) and returns it. The file appears whole or not at
// all, and is refused before it is written when dir lacks the room (on
// TERRA-STATE, the reserve beside it).
func Write(ctx context.Context, h *host.Host, c *machineconfig.Config, release, dir string, opts ...Option) (Result, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	pass := c.Cluster.VolumesBackupPassphrase()
	if pass == "" {
		return Result{}, ErrNotEnabled
	}
	area := h.Path(layout.LocalVolumesDir)
	if _, err := os.Stat(filepath.Join(area, layout.LocalVolumesMarker)); err != nil {
		return Result{}, ErrNoArea
	}
	scan, err := backup.ScanVolumes(area)
	if err != nil {
		return Result{}, fmt.Errorf("volume backup: %w", err)
	}
	need := diskspace.Need{
		What: "the volume backup", Path: dir, Bytes: uint64(scan.ArchiveBytes), //nolint:gosec // a sum of sizes
		Fix: "write it onto a stick with more free space (the backup is written whole or not at all)",
	}
	onState, err := diskspace.SameFS(o.space, dir, h.Path(filepath.Dir(layout.LocalVolumesImage)))
	if err != nil {
		return Result{}, fmt.Errorf("volume backup: check the free space: %w", err)
	}
	if onState {
		need.Reserve = o.reserve
		need.Fix = "write it onto a TERRA-BACKUP stick or another disk, or free space on TERRA-STATE"
	}
	if err := diskspace.Check(o.space, need); err != nil {
		return Result{}, fmt.Errorf("volume backup: %w", err)
	}
	m := backup.VolumesManifest{
		Cluster: c.Cluster.Name, CACertHash: c.Cluster.CACertHash, Node: c.Hostname,
		TakenAt: h.Now().UTC().Truncate(1e9), Release: release,
	}
	res := Result{Path: filepath.Join(dir, backup.VolumesFileName(c.Cluster.Name, c.Hostname, m.TakenAt)), Volumes: len(scan.Volumes)}
	err = atomicfile.Write(res.Path, 0o600, func(w io.Writer) error {
		var err error
		res.VolumesWritten, err = backup.WriteVolumes(ctx, w, pass, m, area, scan)
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("volume backup: writing %s: %w", res.Path, err)
	}
	if fi, err := os.Stat(res.Path); err == nil {
		res.Size = fi.Size()
	}
	return res, nil
}
