//go:build e2e

package qemutests

import "testing"

// TestConfigChannelsMore boots the config channels' variants that make
// test leaves out (channel.e2e), as TestConfigChannels boots the rest:
// NoCloud on ISO 9660 with network-config v2's static address, a whole
// machine config in a vSphere OVF environment property, and an Ignition
// config that partitions disks, refused with nothing applied.
func TestConfigChannelsMore(t *testing.T) {
	t.Parallel()
	runChannels(t, true)
}
