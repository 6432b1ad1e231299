package machineconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckLinkNaming(t *testing.T) {
	const predictable = "console=ttyS0 quiet terrarium.slot=a"
	const kernelNames = "console=ttyS0 net.ifnames=0 quiet"
	for _, tc := range []struct {
		name, cmdline string
		ifc           Interface
		wantErr       string
	}{
		{"predictable literal", predictable, Interface{Name: "enp0s3"}, ""},
		{"predictable glob", predictable, Interface{Name: "en*"}, ""},
		{"by MAC", predictable, Interface{MACAddress: "52:54:00:12:34:56"}, ""},
		{"catch-all glob", predictable, Interface{Name: "*"}, ""},
		{"kernel name", predictable, Interface{Name: "eth0"}, `$.network.interfaces[0].name: "eth0" is a kernel link name`},
		{"kernel glob", predictable, Interface{Name: "eth*"}, `"eth*" is a kernel link name`},
		{"wlan", predictable, Interface{Name: "wlan1"}, "choose the link by macAddress"},
		{"kernel names kept", kernelNames, Interface{Name: "eth0"}, ""},
		{"last net.ifnames wins", kernelNames + " net.ifnames=1", Interface{Name: "eth0"}, "net.ifnames=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Network: Network{Interfaces: []Interface{tc.ifc}}}
			err := CheckLinkNaming(c, tc.cmdline)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
}
