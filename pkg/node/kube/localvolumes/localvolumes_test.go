package localvolumes_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/localvolumes"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// keep is what the default config leaves free beside the area.
var keep = (&machineconfig.Config{}).LocalVolumesKeep()

func TestPlan(t *testing.T) {
	require.Equal(t, 2*gib, keep, "the default state reserve and the headroom")
	for _, tt := range []struct {
		name              string
		size, total, free int64
		want              int64
		why               string
	}{
		{name: "default: a quarter", total: 100 * gib, free: 90 * gib, want: 25 * gib},
		{name: "asked", size: 40 * gib, total: 100 * gib, free: 90 * gib, want: 40 * gib},
		{name: "asked more than the room", size: 40 * gib, total: 100 * gib, free: 12 * gib, want: 10 * gib, why: "40.0 GiB asked, 10.0 GiB made"},
		{name: "default short of room", total: 8 * gib, free: 3 * gib, want: 1 * gib, why: "2.0 GiB asked, 1.0 GiB made"},
		{name: "rounded to MiB", size: 100*mib + 5, total: 100 * gib, free: 90 * gib, want: 100 * mib},
		{name: "no room", total: 4 * gib, free: 2*gib + 10*mib, why: "no room for a volume area"},
		{name: "nothing free", total: 4 * gib, free: 0, why: "no room for a volume area"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, why := localvolumes.Plan(tt.size, keep, tt.total, tt.free)
			assert.Equal(t, tt.want, n, "area size")
			if tt.why == "" {
				assert.Empty(t, why)
			} else {
				assert.Contains(t, why, tt.why)
			}
			if n > 0 {
				assert.GreaterOrEqual(t, tt.free-n, keep, "what the node keeps stays free")
			}
		})
	}
}

// fakeNode is a host whose mkfs, modprobe and mount are recorded; mount
// makes the area "mounted".
type fakeNode struct {
	h       *host.Host
	ran     []string
	mounted bool
	// mountFails: the unit starts but nothing is mounted.
	mountFails bool
	fail       map[string]error
	said       []string
}

func newNode(t *testing.T) *fakeNode {
	n := &fakeNode{fail: map[string]error{}}
	n.h = &host.Host{Root: t.TempDir(), Clock: host.ClockFunc(time.Now), Executor: host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		cmd := name + " " + strings.Join(args, " ")
		n.ran = append(n.ran, cmd)
		if err := n.fail[name]; err != nil {
			return []byte("boom"), err
		}
		if name == "mkfs.ext4" {
			// The real mkfs writes the file it is given: it must exist.
			if _, err := os.Stat(n.h.Path(args[len(args)-1])); err != nil {
				return nil, err
			}
		}
		if name == "systemctl" && len(args) == 2 && args[0] == "start" && args[1] == layout.LocalVolumesUnit {
			// The unit mounts the area, whose directory systemd makes.
			if err := os.MkdirAll(n.h.Path(layout.LocalVolumesDir), 0o755); err != nil {
				return nil, err
			}
			n.mounted = !n.mountFails
		}
		return nil, nil
	})}
	return n
}

// fakeFS is TERRA-STATE with total and free bytes, on which the volume
// area's directory is a file system of its own once mounted.
type fakeFS struct {
	n           *fakeNode
	total, free int64
}

func (f fakeFS) Space(path string) (diskspace.Space, error) {
	sp := diskspace.Space{Total: uint64(f.total), Avail: uint64(f.free), Device: 1}
	if path == f.n.h.Path(layout.LocalVolumesDir) && f.n.mounted {
		sp.Device = 2
	}
	return sp, nil
}

func (n *fakeNode) area(total, free int64) *localvolumes.Area {
	return &localvolumes.Area{
		Host: n.h,
		FS:   fakeFS{n: n, total: total, free: free},
		Say:  func(f string, a ...any) { n.said = append(n.said, fmt.Sprintf(f, a...)) },
	}
}

func TestEnsureMakesMountsAndMarks(t *testing.T) {
	ctx := context.Background()
	n := newNode(t)
	require.NoError(t, os.MkdirAll(n.h.Path(filepath.Dir(layout.LocalVolumesImage)), 0o755))
	a := n.area(8*gib, 6*gib)

	res, err := a.Ensure(ctx, localvolumes.Spec{Size: 0, Keep: keep})
	require.NoError(t, err)
	assert.Equal(t, localvolumes.Result{Size: 2 * gib, Made: true}, res)
	st, err := os.Stat(n.h.Path(layout.LocalVolumesImage))
	require.NoError(t, err)
	assert.Equal(t, 2*gib, st.Size(), "the area's file is allocated whole")
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.NoFileExists(t, n.h.Path(layout.LocalVolumesImage+".new"))
	assert.Equal(t, []string{
		"mkfs.ext4 -q -F -L TERRA-VOLUMES -m 0 -E lazy_itable_init=0,lazy_journal_init=0 " + layout.LocalVolumesImage + ".new",
		"modprobe loop",
		"systemctl start var-lib-terrarium-volumes.mount",
	}, n.ran)
	assert.FileExists(t, n.h.Path(filepath.Join(layout.LocalVolumesDir, layout.LocalVolumesMarker)))
	dst, err := os.Stat(n.h.Path(layout.LocalVolumesDir))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), dst.Mode().Perm(), "only root walks the area")
	require.NoError(t, a.Check())

	// Mounted: nothing to do.
	n.ran = nil
	res, err = a.Ensure(ctx, localvolumes.Spec{Size: 0, Keep: keep})
	require.NoError(t, err)
	assert.Equal(t, localvolumes.Result{Size: 2 * gib}, res)
	assert.Empty(t, n.ran)

	// The next boot: the area is there, it is mounted, never remade,
	// and a config asking another size is told it applies to a new area.
	n.mounted, n.ran = false, nil
	require.Error(t, a.Check(), "an area not mounted is drift")
	res, err = a.Ensure(ctx, localvolumes.Spec{Size: 4 * gib, Keep: keep})
	require.NoError(t, err)
	assert.Equal(t, localvolumes.Result{Size: 2 * gib}, res)
	assert.NotContains(t, strings.Join(n.ran, "\n"), "mkfs")
	assert.Contains(t, strings.Join(n.said, "\n"), "applies only to a new area")
}

func TestEnsureAfterAPowerCutWhileMaking(t *testing.T) {
	n := newNode(t)
	half := n.h.Path(layout.LocalVolumesImage + ".new")
	require.NoError(t, os.MkdirAll(filepath.Dir(half), 0o755))
	require.NoError(t, os.WriteFile(half, []byte("half made"), 0o600))

	res, err := n.area(8*gib, 6*gib).Ensure(context.Background(), localvolumes.Spec{Size: 128 * mib, Keep: keep})
	require.NoError(t, err)
	assert.True(t, res.Made)
	st, err := os.Stat(n.h.Path(layout.LocalVolumesImage))
	require.NoError(t, err)
	assert.Equal(t, 128*mib, st.Size())
	assert.NoFileExists(t, half)
}

func TestEnsureFailuresLeaveNoArea(t *testing.T) {
	n := newNode(t)
	require.NoError(t, os.MkdirAll(n.h.Path(filepath.Dir(layout.LocalVolumesImage)), 0o755))
	n.fail["mkfs.ext4"] = fmt.Errorf("exit status 1")

	_, err := n.area(8*gib, 6*gib).Ensure(context.Background(), localvolumes.Spec{Size: 0, Keep: keep})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "volume area: make its filesystem")
	assert.NoFileExists(t, n.h.Path(layout.LocalVolumesImage), "a failed mkfs leaves no area under its name")

	delete(n.fail, "mkfs.ext4")
	n.fail["systemctl"] = fmt.Errorf("exit status 1")
	_, err = n.area(8*gib, 6*gib).Ensure(context.Background(), localvolumes.Spec{Size: 0, Keep: keep})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mount the volume area")
	assert.NoFileExists(t, n.h.Path(filepath.Join(layout.LocalVolumesDir, layout.LocalVolumesMarker)), "no marker on the directory beneath")

	delete(n.fail, "systemctl")
	n.mountFails = true
	_, err = n.area(8*gib, 6*gib).Ensure(context.Background(), localvolumes.Spec{Size: 0, Keep: keep})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not a mount point")
	assert.NoFileExists(t, n.h.Path(filepath.Join(layout.LocalVolumesDir, layout.LocalVolumesMarker)), "no marker on the directory beneath")
}

func TestEnsureWithoutRoom(t *testing.T) {
	n := newNode(t)
	a := n.area(4*gib, 2*gib)
	res, err := a.Ensure(context.Background(), localvolumes.Spec{Size: 0, Keep: keep})
	require.NoError(t, err, "a node short of room forms without an area")
	assert.Contains(t, res.Skipped, "no room for a volume area")
	assert.Empty(t, n.ran)
	assert.NoFileExists(t, n.h.Path(layout.LocalVolumesImage))
	assert.NoError(t, a.Check(), "no area is no drift")
}
