package diskspace

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		avail uint64
		need  Need
		want  string // "" when it fits
	}{
		{name: "fits beside the reserve", avail: 2048 * mib,
			need: Need{What: "the side-load", Path: "/var/lib/terrarium/registry", Bytes: 512 * mib, Reserve: 1024 * mib}},
		{name: "fits exactly", avail: 1536 * mib,
			need: Need{What: "the side-load", Path: "/var", Bytes: 512 * mib, Reserve: 1024 * mib}},
		{name: "eats into the reserve", avail: 1200 * mib,
			need: Need{What: "the side-load", Path: "/var/lib/terrarium/registry", Bytes: 512 * mib, Reserve: 1024 * mib, Fix: "remove images"},
			want: "the side-load needs 512.0 MiB on /var/lib/terrarium/registry, which has 1.2 GiB free and keeps 1.0 GiB of it for etcd (state.reserveMiB): not enough free space; remove images, or lower state.reserveMiB in the node's config if etcd needs less"},
		{name: "less free than the reserve", avail: 100 * mib,
			need: Need{What: "the snapshot", Path: "/var", Bytes: 1, Reserve: 1024 * mib},
			want: "the snapshot needs 1 bytes on /var, which has 100.0 MiB free and keeps 1.0 GiB of it for etcd (state.reserveMiB): not enough free space; lower state.reserveMiB in the node's config if etcd needs less"},
		{name: "a stick: no reserve", avail: 10 * mib,
			need: Need{What: "the backup", Path: "/run/stick", Bytes: 20 * mib, Fix: "use a larger stick"},
			want: "the backup needs 20.0 MiB on /run/stick, which has 10.0 MiB free: not enough free space; use a larger stick"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(Fixed{Avail: tc.avail}, tc.need)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrNoSpace)
			assert.EqualError(t, err, tc.want)
			var s *Shortage
			require.ErrorAs(t, err, &s)
			assert.Equal(t, tc.avail, s.Avail)
		})
	}
}

type failingFS struct{}

func (failingFS) Space(string) (Space, error) { return Space{}, errors.New("no such file system") }

// A write that cannot be measured does not start, and it is not called a
// shortage.
func TestCheckCannotMeasure(t *testing.T) {
	err := Check(failingFS{}, Need{What: "the backup", Path: "/x", Bytes: 1})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoSpace)
	assert.ErrorContains(t, err, "check the free space for the backup: no such file system")
}

func TestStatfs(t *testing.T) {
	dir := t.TempDir()
	sp, err := Statfs{}.Space(dir)
	require.NoError(t, err)
	assert.Positive(t, sp.Total)
	assert.LessOrEqual(t, sp.Avail, sp.Total)
	same, err := SameFS(nil, dir, dir+"/.")
	require.NoError(t, err)
	assert.True(t, same)
	_, err = Statfs{}.Space(dir + "/missing")
	assert.ErrorContains(t, err, "statfs "+dir+"/missing")
}

func TestSize(t *testing.T) {
	for n, want := range map[uint64]string{
		812: "812 bytes", 4 << 10: "4.0 KiB", 120<<20 + 512<<10: "120.5 MiB", 1 << 30: "1.0 GiB",
	} {
		assert.Equal(t, want, Size(n))
	}
}
