package firstboot

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Blessing an upgrade's trial boot ends the trial for the registry, which
// then lets go of the slot it fell back to; a boot that is not blessed
// keeps it.
func TestBlessingEndsTheUpgradeTrial(t *testing.T) {
	t.Run("blessed", func(t *testing.T) {
		e := newEnv(t)
		e.loader.trial = true
		e.write(layout.RunTrialBoot, "b\n")
		require.NoError(t, e.run(fullConfig))
		require.NotEmpty(t, e.loader.blessCalls())
		assert.False(t, e.exists(layout.RunTrialBoot))
	})
	t.Run("not blessed", func(t *testing.T) {
		e := newEnv(t)
		e.setRelease([]string{"health"})
		e.loader.trial = true
		e.write(layout.RunTrialBoot, "b\n")
		require.NoError(t, e.run(fullConfig))
		require.Empty(t, e.loader.blessCalls())
		assert.True(t, e.exists(layout.RunTrialBoot), "the trial goes on into the next try")
	})
}
