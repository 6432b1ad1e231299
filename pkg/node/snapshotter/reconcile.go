package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/continuity/fs"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/image/layers"
)

// OtherSlot opens the other slot's unpacked layers (its squashfs mounted
// read-only) for Reconcile, and closes them with done.
type OtherSlot func(ctx context.Context) (dir string, done func(), err error)

// Reconciled is what Reconcile did.
type Reconciled struct {
	// Kept are the layers copied from the other slot onto STATE;
	// Missing those no slot holds any more (their images cannot run).
	Kept, Missing []string
}

// keptDir is where Reconcile keeps layers copied from the other slot.
func (s *Snapshotter) keptDir(d v1.Hash) string {
	return layers.Dir(filepath.Join(s.root, "kept"), d)
}

// Reconcile runs before containerd starts. A snapshot taken from a slot
// links to that slot's directory, which the other slot, booted after an
// upgrade (or a rollback), may not hold: the old Kubernetes' images, whose
// static pods run until the node's Kubernetes is upgraded. Such a layer is
// copied from the other slot (whose squashfs is intact until the next
// upgrade writes it) onto STATE, once, and the snapshot's link pointed at
// the copy. A layer neither slot holds is reported.
func (s *Snapshotter) Reconcile(ctx context.Context, other OtherSlot) (Reconciled, error) {
	var res Reconciled
	type dangling struct {
		link   string
		diffID v1.Hash
	}
	var todo []dangling
	err := s.Snapshotter.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		if i.Kind != snapshots.KindCommitted || i.Labels[LabelFromSlot] != "true" {
			return nil
		}
		link := i.Labels[labelUpper]
		target, err := os.Readlink(link)
		if err != nil {
			return nil // not a link: not the slot's
		}
		if _, err := os.Stat(target); err == nil {
			return nil
		}
		d, err := v1.NewHash(i.Labels[labelDiffID])
		if err != nil {
			return nil
		}
		todo = append(todo, dangling{link: link, diffID: d})
		return nil
	})
	if err != nil || len(todo) == 0 {
		return res, err
	}
	var dir string
	if other != nil {
		d, done, err := other(ctx)
		if err != nil {
			s.log.Warn("snapshotter: the other slot could not be opened", "err", err)
		} else {
			defer done()
			dir = d
		}
	}
	for _, t := range todo {
		kept := s.keptDir(t.diffID)
		if _, err := os.Stat(kept); err != nil {
			src := ""
			if dir != "" {
				src = layers.Dir(dir, t.diffID)
			}
			if src == "" || !isDir(src) {
				res.Missing = append(res.Missing, t.diffID.String())
				continue
			}
			if err := copyLayer(src, kept); err != nil {
				return res, err
			}
			res.Kept = append(res.Kept, t.diffID.String())
		}
		if err := relink(t.link, kept); err != nil {
			return res, err
		}
	}
	return res, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// copyLayer copies a layer's directory (device nodes, extended attributes
// and owners kept) to dst, through a sibling renamed into place once whole.
func copyLayer(src, dst string) error {
	tmp := dst + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := fs.CopyDir(tmp, src); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("keep layer %s: %w", src, err)
	}
	return os.Rename(tmp, dst)
}

// relink points the link at target, atomically.
func relink(link, target string) error {
	tmp := link + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}
