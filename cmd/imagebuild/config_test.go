package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `imagebuild config validate` refuses a link name the image never gives,
// naming the field and the fix, with and without the image's spec.
func TestValidateChecksLinkNaming(t *testing.T) {
	dir := t.TempDir()
	write := func(name, iface string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n1\nnetwork:\n  interfaces:\n    - name: "+iface+"\n      dhcp: true\n"), 0o644))
		return p
	}
	kernel, predictable := write("eth.yaml", "eth0"), write("en.yaml", "en*")
	for _, specPath := range []string{"", "../../os/terrarium.yaml"} {
		err := validateConfig(kernel, specPath, "")
		require.Error(t, err, "spec %q", specPath)
		assert.Contains(t, err.Error(), kernel+`: $.network.interfaces[0].name: "eth0" is a kernel link name`)
		assert.NoError(t, validateConfig(predictable, specPath, ""))
	}
}
