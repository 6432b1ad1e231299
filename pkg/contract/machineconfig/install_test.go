package machineconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateInstall(t *testing.T) {
	tests := []struct {
		name string
		in   Install
		want string // "" for valid
	}{
		{"any disk", Install{}, ""},
		{"every selector", Install{Disk: DiskSelector{
			Path: "/dev/disk/by-path/pci-0000:00:17.0-ata-1", ID: "/dev/disk/by-id/ata-Samsung_SSD_870_S5XYNX0R", Serial: "S5XYNX0R",
			MinSize: "100GiB", MaxSize: "2TB",
		}, Wipe: true}, ""},
		{"path not by-path", Install{Disk: DiskSelector{Path: "/dev/sda"}},
			`$.install.disk.path: "/dev/sda" is not a /dev/disk/by-path/ link (ls -l /dev/disk/by-path/ on the machine lists them)`},
		{"bare by-id", Install{Disk: DiskSelector{ID: "/dev/disk/by-id/"}},
			`$.install.disk.id: "/dev/disk/by-id/" is not a /dev/disk/by-id/ link (ls -l /dev/disk/by-id/ on the machine lists them)`},
		{"serial with blanks", Install{Disk: DiskSelector{Serial: " X1 "}},
			`$.install.disk.serial: " X1 " has leading or trailing blanks; write the serial number alone`},
		{"size without unit", Install{Disk: DiskSelector{MinSize: "100"}},
			`$.install.disk.minSize: "100" is not a size: write a number and a unit, like 100GiB or 2TB`},
		{"max below min", Install{Disk: DiskSelector{MinSize: "1TB", MaxSize: "500GB"}},
			`$.install.disk.maxSize: 500GB is less than minSize 1TB: no disk can match`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			in := tt.in
			c.Install = &in
			err := c.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"100GiB": 100 << 30, "2TB": 2e12, "1.5TB": 1.5e12, "512MiB": 512 << 20, "4096B": 4096, "8 GiB": 8 << 30, "1kB": 1000,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "100", "GiB", "-1GiB", "0GB", "1e30TB", "ten GB", "1 PB"} {
		_, err := ParseSize(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestDiskSelectorString(t *testing.T) {
	assert.Equal(t, "any disk", DiskSelector{}.String())
	assert.Equal(t, "serial X1, minSize 100GiB", DiskSelector{Serial: "X1", MinSize: "100GiB"}.String())
}
