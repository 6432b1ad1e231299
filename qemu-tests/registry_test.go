package qemutests

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// slotImages are images of the default image's own bundle, read from the
// bundle files os/terrarium.yaml names: a short path and a nested one on
// registry.k8s.io, and one on a second registry host (docker.io).
func slotImages(t testing.TB) []string {
	t.Helper()
	s, err := spec.Parse(filepath.Join("..", "os", "terrarium.yaml"))
	require.NoError(t, err)
	var names []string
	for _, path := range s.Bundles {
		b, err := bundle.Parse(s.Resolve(path))
		require.NoError(t, err)
		for _, img := range b.Images {
			names = append(names, img.Name)
		}
	}
	var picked []string
	for _, repo := range []string{"registry.k8s.io/pause:", "registry.k8s.io/coredns/coredns:", "docker.io/flannel/flannel:"} {
		i := slices.IndexFunc(names, func(n string) bool { return strings.HasPrefix(n, repo) })
		require.GreaterOrEqual(t, i, 0, "os/terrarium.yaml's bundles carry no %s image; they carry %v", repo, names)
		picked = append(picked, names[i])
	}
	return picked
}

func adminConfig(hostname, key, extra string) string {
	return `apiVersion: terrarium.dev/v1alpha1
kind: MachineConfig
hostname: ` + hostname + `
network:
  interfaces:
    - name: "en*"
      dhcp: true
admin:
  name: admin
  sshAuthorizedKeys:
    - ` + key + "\n" + extra
}
