package volumebackup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Source offers the directory a new node's volume backups are read from:
// it calls fn with that directory (under the host's root); found is false
// when there is none.
type Source func(ctx context.Context, fn func(dir string) error) (found bool, err error)

// FromStick is the Source of a TERRA-BACKUP stick inserted into h, mounted
// read-only for fn.
func FromStick(h *host.Host, md media.Media) Source {
	return func(ctx context.Context, fn func(dir string) error) (bool, error) {
		m, ok := md.Find(layout.LabelBackup, layout.LabelBackupFAT)
		if !ok {
			return false, nil
		}
		return true, md.Use(ctx, m, false, func(dir string) error { return fn(h.Path(dir)) })
	}
}

const (
	// stagingName is the directory at the top of the area a restore
	// unpacks into: hidden, so no volume is ever named so, and on the
	// area's own file system, so each volume moves into place by rename.
	stagingName = ".restore"
	// completeName, inside the staging directory, says every volume was
	// unpacked and synced: a restore cut after it only moves them.
	completeName = ".complete"
)

// Restored is what Restore did.
type Restored struct {
	// File is the backup it restored from (its base name), and Manifest
	// what it held; both empty when Skipped says why nothing was.
	File     string
	Manifest *backup.VolumesManifest
	Skipped  string
}

// Restore fills a new node's volume area with its volumes from the newest
// volume backup of its name the source offers, before any pod runs on
// the node. It acts only on an area that holds no volume: an area the node
// already uses is never overwritten. The backup must be of this node of
// this cluster (its passphrase is the node's, and its manifest says so).
// The volumes are unpacked beside the area's volumes, synced, and only
// then moved into place: cut by a power loss, a restore starts again, or,
// once everything was unpacked, finishes the moves.
func Restore(ctx context.Context, h *host.Host, c *machineconfig.Config, src Source) (Restored, error) {
	area := h.Path(layout.LocalVolumesDir)
	if _, err := os.Stat(filepath.Join(area, layout.LocalVolumesMarker)); err != nil {
		return Restored{Skipped: "the node has no volume area"}, nil
	}
	staging := filepath.Join(area, stagingName)
	if file, err := os.ReadFile(filepath.Join(staging, completeName)); err == nil {
		if err := moveIntoPlace(area, staging); err != nil {
			return Restored{}, err
		}
		return Restored{File: strings.TrimSpace(string(file))}, nil
	}
	if err := os.RemoveAll(staging); err != nil {
		return Restored{}, fmt.Errorf("restore volumes: drop an interrupted restore: %w", err)
	}
	if names, err := backup.ListVolumes(area); err != nil {
		return Restored{}, err
	} else if len(names) > 0 {
		return Restored{Skipped: "the volume area already holds volumes: " + strings.Join(names, ", ")}, nil
	}
	var res Restored
	found, err := src(ctx, func(dir string) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var names []string
		for _, e := range entries {
			if e.Type().IsRegular() {
				names = append(names, e.Name())
			}
		}
		name, ok := backup.NewestVolumes(names, c.Cluster.Name, c.Hostname)
		switch {
		case !ok:
			res.Skipped = fmt.Sprintf("the %s stick holds no volume backup of %s (%s%s-%s-<time>%s)", layout.LabelBackup, c.Hostname, backup.VolumesPrefix, c.Cluster.Name, c.Hostname, backup.Suffix)
			return nil
		case !Enabled(c):
			res.Skipped = fmt.Sprintf("the %s stick holds %s, and %v", layout.LabelBackup, name, ErrNotEnabled)
			return nil
		}
		res.File = name
		m, err := unpack(c, filepath.Join(dir, name), staging)
		if err != nil {
			_ = os.RemoveAll(staging)
			return fmt.Errorf("restore volumes from %s: %w", name, err)
		}
		res.Manifest = m
		return nil
	})
	if err != nil {
		return Restored{}, err
	}
	if !found {
		return Restored{Skipped: "no " + layout.LabelBackup + " stick"}, nil
	}
	if res.Manifest == nil {
		return res, nil
	}
	return res, moveIntoPlace(area, staging)
}

// unpack decrypts and checks the volume backup file into staging, syncs
// it, and marks it complete.
func unpack(c *machineconfig.Config, file, staging string) (*backup.VolumesManifest, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The area's own file system bounds the unpacking: a backup larger
	// than the area stops it, and the staging directory goes.
	m, err := backup.ExtractVolumes(f, c.Cluster.VolumesBackupPassphrase(), staging, os.Geteuid() == 0)
	if err != nil {
		return nil, err
	}
	switch {
	case m.Cluster != c.Cluster.Name || m.CACertHash != c.Cluster.CACertHash:
		return nil, fmt.Errorf("it is a backup of cluster %s (CA %s), and this node's config is for cluster %s (CA %s)", m.Cluster, m.CACertHash, c.Cluster.Name, c.Cluster.CACertHash)
	case m.Node != c.Hostname:
		return nil, fmt.Errorf("it holds the volumes of node %s, and this node is %s", m.Node, c.Hostname)
	}
	if err := atomicfile.SyncFS(staging); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(staging, completeName), []byte(filepath.Base(file)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return m, atomicfile.SyncFS(staging)
}

// moveIntoPlace moves every volume of a complete restore from staging to
// the top of the area, then drops staging. A volume already moved (by a
// restore cut short) is not there any more to move.
func moveIntoPlace(area, staging string) error {
	names, err := backup.ListVolumes(staging)
	if err != nil {
		return fmt.Errorf("restore volumes: %w", err)
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(staging, n), filepath.Join(area, n)); err != nil {
			return fmt.Errorf("restore volumes: move %s into place: %w", n, err)
		}
	}
	if err := atomicfile.SyncFS(area); err != nil {
		return fmt.Errorf("restore volumes: %w", err)
	}
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("restore volumes: %w", err)
	}
	return atomicfile.SyncFS(area)
}
