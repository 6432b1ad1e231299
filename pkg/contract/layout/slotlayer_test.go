package layout

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSlotLayer(t *testing.T) {
	hex := "9de658b9ec2736385074da7c2d8fe65a6014b8a9e4ef0754b9b20773d2d0c836"
	dir, ok := SlotLayer("/usr/lib/terrarium/layers", "sha256:"+hex)
	assert.True(t, ok)
	assert.Equal(t, "/usr/lib/terrarium/layers/sha256/"+hex, dir)
	for _, bad := range []string{"", hex, "sha512:" + hex, "sha256:" + hex[:63], "sha256:../../etc/passwd", "sha256:" + hex[:63] + "G"} {
		_, ok := SlotLayer("/x", bad)
		assert.False(t, ok, "%q names no directory", bad)
	}
}
