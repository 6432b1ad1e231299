package etcdbackup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Source offers the backup a new init node restores from: it calls fn
// with the backup's path in the file system (under the host's root);
// found is false when there is none to offer.
type Source func(ctx context.Context, fn func(file string) error) (found bool, err error)

// FromStick is the Source of a TERRA-BACKUP stick inserted into h,
// mounted read-only for fn: its newest backup file (by the time in its
// name). A stick without one is an error: the person meant a restore.
func FromStick(h *host.Host, md media.Media) Source {
	return func(ctx context.Context, fn func(file string) error) (bool, error) {
		m, ok := md.Find(layout.LabelBackup, layout.LabelBackupFAT)
		if !ok {
			return false, nil
		}
		err := md.Use(ctx, m, false, func(dir string) error {
			file, err := newestOn(h.Path(dir))
			if err != nil {
				return fmt.Errorf("the %s stick %s: %w", layout.LabelBackup, m.Device, err)
			}
			return fn(file)
		})
		return true, err
	}
}

// newestOn is the newest backup file in dir's top level: a regular file
// (a link is never followed off the medium).
func newestOn(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	name, ok := backup.Newest(names)
	if !ok {
		return "", fmt.Errorf("it holds no backup file (%s<cluster>-<node>-<time>%s); write one with `firstboot backup` or by inserting the stick into a running control plane", backup.Prefix, backup.Suffix)
	}
	return filepath.Join(dir, name), nil
}
