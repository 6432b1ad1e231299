// Package snapshotter is the node's containerd snapshotter: containerd's
// own overlayfs snapshotter on TERRA-STATE, which takes the layers of the
// slot's bundle from the slot itself.
//
// The build unpacks every bundled layer into the slot, in the form an
// overlayfs snapshot keeps (pkg/image/layers, one directory per diffID).
// When containerd unpacks an image it asks for each layer's snapshot with
// the layer's chain ID as the target and its diffID among the labels
// (containerd's remote-snapshot protocol, as stargz and SOCI use it). For a
// layer the slot holds, the snapshotter commits a snapshot whose
// directory is a link to the slot's and answers "already exists":
// containerd then neither fetches the layer's blob nor unpacks it. What the
// slot does not hold (a side-loaded or peer-fetched image) is unpacked as
// usual. Containers' writable layers are overlayfs upper directories on
// STATE as ever.
package snapshotter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/plugins/snapshots/overlay"
	"github.com/containerd/errdefs"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Labels of containerd's unpacker (core/unpack) and of the overlayfs
// snapshotter.
const (
	labelTarget = "containerd.io/snapshot.ref"
	labelDiffID = "containerd.io/snapshot/diff-id"
	labelUpper  = "containerd.io/snapshot/overlay.upperdir"
	// LabelFromSlot marks a snapshot whose directory is the slot's.
	LabelFromSlot = "containerd.io/snapshot/terrarium.from-slot"
)

// Snapshotter is the overlayfs snapshotter with the slot's layers.
type Snapshotter struct {
	snapshots.Snapshotter
	root, layers string
	log          *slog.Logger
}

// New opens the overlayfs snapshotter in root (on STATE) with the unpacked
// layers under layersDir (the slot's; see pkg/image/layers).
func New(root, layersDir string, log *slog.Logger) (*Snapshotter, error) {
	sn, err := overlay.NewSnapshotter(root, overlay.WithUpperdirLabel)
	if err != nil {
		return nil, fmt.Errorf("overlayfs snapshotter in %s: %w", root, err)
	}
	return &Snapshotter{Snapshotter: sn, root: root, layers: layersDir, log: log}, nil
}

// Prepare implements snapshots.Snapshotter. A layer the slot holds is
// committed as the target at once and answered with ErrAlreadyExists;
// anything else is prepared by the overlayfs snapshotter.
func (s *Snapshotter) Prepare(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	var info snapshots.Info
	for _, o := range opts {
		if err := o(&info); err != nil {
			return nil, err
		}
	}
	if dir, ok := s.slotLayer(info.Labels); ok {
		err := s.commitFromSlot(ctx, key, parent, dir, info.Labels)
		if err == nil {
			return nil, fmt.Errorf("layer %s from the slot: %w", info.Labels[labelDiffID], errdefs.ErrAlreadyExists)
		}
		// The layer is unpacked as any other instead.
		s.log.Warn("snapshotter: the slot's layer could not be used", "diffID", info.Labels[labelDiffID], "err", err)
	}
	return s.Snapshotter.Prepare(ctx, key, parent, opts...)
}

// slotLayer is the slot's directory of the layer labels describe, when a
// target is asked for and the slot holds the layer.
func (s *Snapshotter) slotLayer(labels map[string]string) (string, bool) {
	if labels[labelTarget] == "" || labels[labelDiffID] == "" {
		return "", false
	}
	dir, ok := layout.SlotLayer(s.layers, labels[labelDiffID])
	if !ok {
		return "", false
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", false
	}
	return dir, true
}

// commitFromSlot commits, under the name key, a snapshot on parent whose
// directory links to dir, with the labels asked for (the target among
// them: containerd finds the snapshot by it).
func (s *Snapshotter) commitFromSlot(ctx context.Context, key, parent, dir string, labels map[string]string) (err error) {
	active := "terrarium-slot-layer/" + key
	if _, err := s.Snapshotter.Prepare(ctx, active, parent); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := s.Snapshotter.Remove(ctx, active); rerr != nil {
				s.log.Warn("snapshotter: remove an unused snapshot", "key", active, "err", rerr)
			}
		}
	}()
	st, err := s.Snapshotter.Stat(ctx, active)
	if err != nil {
		return err
	}
	upper := st.Labels[labelUpper]
	if upper == "" || filepath.Base(upper) != "fs" {
		return fmt.Errorf("snapshot %s names no upper directory", active)
	}
	// The empty directory the snapshotter made becomes a link to the
	// slot's: overlayfs resolves it where it is a lower layer, and the
	// snapshotter's removal removes the link alone.
	if err := os.Remove(upper); err != nil {
		return err
	}
	if err := os.Symlink(dir, upper); err != nil {
		return err
	}
	// Durable before the snapshot is committed (the snapshotter's
	// metadata is): the link, and the snapshot's own directory.
	if err := atomicfile.SyncDir(filepath.Dir(upper)); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(filepath.Dir(upper))); err != nil {
		return err
	}
	all := map[string]string{LabelFromSlot: "true"}
	for k, v := range labels {
		all[k] = v
	}
	return s.Snapshotter.Commit(ctx, key, active, snapshots.WithLabels(all))
}
