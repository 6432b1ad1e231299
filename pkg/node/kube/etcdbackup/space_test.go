package etcdbackup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// devices is an FS of two file systems: paths under stick are the
// stick's, everything else is STATE's.
type devices struct {
	stick        string
	state, onUSB uint64 // bytes free
}

func (d devices) Space(path string) (diskspace.Space, error) {
	if strings.HasPrefix(path, d.stick) {
		return diskspace.Space{Avail: d.onUSB, Total: 8 << 30, Device: 2}, nil
	}
	return diskspace.Space{Avail: d.state, Total: 4 << 30, Device: 1}, nil
}

// TestBackupSpace: a backup is refused before it is written when its
// stick lacks the room, or when written onto STATE it would eat into the
// reserve; the refusal names the sizes.
func TestBackupSpace(t *testing.T) {
	const reserve = 1 << 30
	for _, tc := range []struct {
		name          string
		onState       bool
		state, onUSB  uint64
		want          []string // "" : written
		wantNoReserve bool
	}{
		{name: "onto a stick with room", state: 1, onUSB: 1 << 20},
		{name: "onto a stick too small (STATE's reserve does not matter)", state: 8 << 30, onUSB: 1 << 10,
			want: []string{"backup: the backup needs ", " KiB on %s, which has 1.0 KiB free: not enough free space; write it onto a stick with more free space"}, wantNoReserve: true},
		{name: "onto STATE, with room beside the reserve", onState: true, state: reserve + 1<<20},
		{name: "onto STATE, eating into the reserve", onState: true, state: reserve + 1<<10,
			want: []string{"which has 1.0 GiB free and keeps 1.0 GiB of it for etcd (state.reserveMiB): not enough free space; write it onto a TERRA-BACKUP stick or another disk"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			s, err := Take(context.Background(), n.h, 3)
			require.NoError(t, err)
			dir := t.TempDir()
			if tc.onState {
				dir = n.h.Path("/var/lib/terrarium/backups")
				require.NoError(t, os.MkdirAll(dir, 0o700))
			}
			fs := devices{stick: dir, state: tc.state, onUSB: tc.onUSB}
			if tc.onState {
				fs.stick = "/nowhere"
			}
			file, err := WriteBackup(n.h, n.cfg, Info{Release: "0.1.0"}, s, dir, WithSpace(fs, reserve))
			if tc.want == nil {
				require.NoError(t, err)
				assert.FileExists(t, file)
				return
			}
			require.ErrorIs(t, err, diskspace.ErrNoSpace)
			t.Log(err)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, strings.ReplaceAll(w, "%s", dir))
			}
			var short *diskspace.Shortage
			require.ErrorAs(t, err, &short)
			assert.Greater(t, short.Bytes, uint64(s.Size), "the backup holds the snapshot")
			if tc.wantNoReserve {
				assert.Zero(t, short.Reserve, "a stick keeps no reserve")
			} else {
				assert.EqualValues(t, reserve, short.Reserve)
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing written")
		})
	}
}

// TestTakeSpace: a snapshot that would eat into STATE's reserve is
// refused before etcdctl runs, naming the database's size.
func TestTakeSpace(t *testing.T) {
	n := newTestNode(t)
	db := n.h.Path(filepath.Join(layout.EtcdDataDir, "member", "snap", "db"))
	require.NoError(t, os.MkdirAll(filepath.Dir(db), 0o700))
	f, err := os.Create(db)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(300<<20)) // sparse
	require.NoError(t, f.Close())

	_, err = Take(context.Background(), n.h, 3, WithSpace(diskspace.Fixed{Avail: 1200 << 20}, 1<<30))
	require.ErrorIs(t, err, diskspace.ErrNoSpace)
	t.Log(err)
	assert.ErrorContains(t, err, "etcd snapshot: the etcd snapshot needs 300.0 MiB on "+n.h.Path(layout.EtcdSnapshotDir)+
		", which has 1.2 GiB free and keeps 1.0 GiB of it for etcd (state.reserveMiB): not enough free space; keep fewer snapshots (cluster.backup.keep)")
	assert.Nil(t, n.etcd.lastCall("etcdctl"), "etcdctl did not run")
	list, err := List(n.h)
	require.NoError(t, err)
	assert.Empty(t, list)

	_, err = Take(context.Background(), n.h, 3, WithSpace(diskspace.Fixed{Avail: 1400 << 20}, 1<<30))
	require.NoError(t, err, "room for it beside the reserve")
}
