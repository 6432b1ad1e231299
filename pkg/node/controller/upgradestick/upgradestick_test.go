package upgradestick

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/controller/controllertest"
)

// installer installs when installs says so, and counts.
type installer struct {
	installs bool
	from     []string
	reboots  int
	lock     *controller.ChangeLock
	held     []bool
}

func (i *installer) FromMedium(_ context.Context, cfg *machineconfig.Config, m media.Medium) bool {
	i.from = append(i.from, cfg.Hostname+" "+m.Device)
	i.held = append(i.held, !i.lock.TryLock())
	return i.installs
}

func (i *installer) Reboot(context.Context) { i.reboots++ }

// One install per insertion, under the change lock, a reboot only after
// an upgrade was written.
func TestInstallOncePerInsertion(t *testing.T) {
	m := &controllertest.Media{}
	lock := &controller.ChangeLock{}
	in := &installer{lock: lock}
	cfg := &machineconfig.Config{Hostname: "n-1"}
	c := &Controller{Media: m, Config: func() *machineconfig.Config { return cfg }, Changes: lock, Install: in}
	ctx := context.Background()
	require.NoError(t, c.Reconcile(ctx))
	assert.Empty(t, in.from, "no stick")

	m.Insert(layout.LabelUpgradeFAT, "/dev/sdb1")
	require.NoError(t, c.Reconcile(ctx))
	require.NoError(t, c.Reconcile(ctx))
	assert.Equal(t, []string{"n-1 /dev/sdb1"}, in.from, "the stick left in is not installed again")
	assert.Equal(t, []bool{true}, in.held, "under the change lock")
	assert.Zero(t, in.reboots, "refused: no reboot")
	assert.True(t, lock.TryLock(), "let go")
	lock.Unlock()

	m.Pull()
	m.Insert(layout.LabelUpgrade, "/dev/sdb1")
	in.installs = true
	require.NoError(t, c.Reconcile(ctx))
	assert.Len(t, in.from, 2)
	assert.Equal(t, 1, in.reboots, "written: reboots into it")
}
