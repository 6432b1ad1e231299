package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// OtherSlot opens the other slot's unpacked layers (its squashfs mounted
// read-only) for Reconcile, and closes them with done.
type OtherSlot func(ctx context.Context) (dir string, done func(), err error)

// Reconciled is what Reconcile did.
type Reconciled struct {
	// Kept are the layers copied from the other slot onto STATE now;
	// Relinked the snapshots pointed at another directory; Missing the
	// layers no slot holds any more (their images cannot run); Pruned the
	// kept copies no snapshot needs any more.
	Kept, Relinked, Missing, Pruned []string
}

// keptRoot is where Reconcile keeps layers copied from the other slot.
func (s *Snapshotter) keptRoot() string { return filepath.Join(s.root, "kept") }

// Reconcile runs before containerd starts, and makes every snapshot taken
// from a slot link to a directory that holds its layer:
//
//   - the booted slot's, when it holds the layer (after a rollback, the
//     slot's own again);
//   - otherwise a copy kept on STATE: the booted slot may lack a layer
//     another slot gave, the old Kubernetes' images after an upgrade,
//     whose static pods run until the node's Kubernetes is upgraded. It is
//     copied from the other slot (mounted read-only; its squashfs is intact
//     until the next upgrade writes it), once;
//   - a snapshot whose link a power cut left half made is made again.
//
// A layer no slot holds is reported; kept copies no snapshot links to any
// more are removed.
func (s *Snapshotter) Reconcile(ctx context.Context, other OtherSlot) (Reconciled, error) {
	var res Reconciled
	type fromSlot struct {
		link   string
		diffID string
	}
	var all []fromSlot
	err := s.Snapshotter.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		if i.Kind != snapshots.KindCommitted || i.Labels[LabelFromSlot] != "true" || i.Labels[labelUpper] == "" {
			return nil
		}
		d := i.Labels[labelDiffID]
		if _, ok := layout.SlotLayer("", d); !ok {
			return nil
		}
		all = append(all, fromSlot{link: i.Labels[labelUpper], diffID: d})
		return nil
	})
	// A store no snapshot was ever taken in (a node's first boot) has no
	// bucket to walk: nothing to reconcile.
	if err != nil && !errdefs.IsNotFound(err) {
		return res, err
	}
	var (
		otherDir string
		opened   bool
		done     = func() {}
	)
	defer func() { done() }()
	openOther := func() string {
		if !opened && other != nil {
			opened = true
			dir, d, err := other(ctx)
			if err != nil {
				s.log.Warn("snapshotter: the other slot could not be opened", "err", err)
				return ""
			}
			otherDir, done = dir, d
		}
		return otherDir
	}
	used := map[string]bool{}
	var errs []error
	for _, f := range all {
		want, _ := layout.SlotLayer(s.layers, f.diffID)
		if !isDir(want) {
			want, _ = layout.SlotLayer(s.keptRoot(), f.diffID)
			if !isDir(want) {
				src := ""
				if dir := openOther(); dir != "" {
					src, _ = layout.SlotLayer(dir, f.diffID)
				}
				if src == "" || !isDir(src) {
					res.Missing = append(res.Missing, f.diffID)
					continue
				}
				if err := copyLayer(src, want); err != nil {
					errs = append(errs, err)
					continue
				}
				res.Kept = append(res.Kept, f.diffID)
			}
			used[filepath.Base(want)] = true
		}
		if cur, err := os.Readlink(f.link); err == nil && cur == want {
			continue
		}
		if err := relink(f.link, want); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Relinked = append(res.Relinked, f.diffID)
	}
	pruned, err := s.prune(used)
	res.Pruned = pruned
	return res, errors.Join(append(errs, err)...)
}

// prune removes the kept copies no snapshot links to.
func (s *Snapshotter) prune(used map[string]bool) ([]string, error) {
	dir := filepath.Join(s.keptRoot(), "sha256")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pruned []string
	for _, e := range entries {
		if used[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return pruned, err
		}
		pruned = append(pruned, "sha256:"+e.Name())
	}
	return pruned, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// copyLayer copies a layer's directory (device nodes, extended attributes
// and owners kept) to dst, through a sibling renamed into place once whole
// and synced.
func copyLayer(src, dst string) error {
	tmp := dst + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := fs.CopyDir(tmp, src); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("keep layer %s: %w", src, err)
	}
	if err := syncTree(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(dst))
}

// syncTree makes a copied tree durable: its files, then its directories.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() && !d.IsDir() {
			return nil
		}
		return atomicfile.SyncFile(p)
	})
}

// relink makes link a symbolic link to target, durably: an empty
// directory there (a link a power cut left unmade) is replaced.
func relink(link, target string) error {
	if fi, err := os.Lstat(link); err == nil && fi.IsDir() {
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("replace %s with a link to %s: %w", link, target, err)
		}
	}
	tmp := link + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(link))
}
