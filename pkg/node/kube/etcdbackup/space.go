package etcdbackup

import (
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// Option tunes Take and WriteBackup.
type Option func(*options)

type options struct {
	space   diskspace.FS
	reserve uint64
}

// WithSpace makes Take and WriteBackup ask fs for free space (nil: the
// kernel's, which is also the default) and keep reserve bytes free on
// TERRA-STATE (machineconfig.Config.StateReserveBytes: etcd's room). A
// snapshot, or a backup written onto STATE, that would eat into it is
// refused before it is written (diskspace.ErrNoSpace); a backup written
// onto a stick needs only the stick's room.
func WithSpace(fs diskspace.FS, reserve uint64) Option {
	return func(o *options) { o.space, o.reserve = fs, reserve }
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// snapshotNeed is how much a snapshot of the local member takes at most:
// the member's database file (a snapshot is that file, compacted), or,
// without one to read, the newest snapshot's size.
func snapshotNeed(h *host.Host) uint64 {
	if fi, err := os.Stat(h.Path(filepath.Join(layout.EtcdDataDir, "member", "snap", "db"))); err == nil {
		return uint64(fi.Size())
	}
	if s, ok, err := Newest(h); err == nil && ok {
		return uint64(s.Size)
	}
	return 0
}

// backupNeed is how much a backup of a snapshot of size bytes and of pki
// takes at most: the files in a tar (a 512-byte header and padding each),
// age's 16 bytes per 64 KiB chunk, and room for the manifest and headers.
func backupNeed(snapshot int64, pki map[string][]byte) uint64 {
	n := uint64(snapshot)
	for _, b := range pki {
		n += uint64(len(b)) + 1024
	}
	return n + n/1024 + 64<<10
}
