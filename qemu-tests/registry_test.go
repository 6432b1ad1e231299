package qemutests

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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

// TestRegistryAirGapped: on a network with no route out, containerd pulls
// images of the slot's bundle by their upstream names through the
// hosts.toml mirrors (served by the node's own registry), a container from
// one of them runs, and the capture shows no packet leaving the test
// network.
func TestRegistryAirGapped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	images := slotImages(t)
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	key := newSSHKey(t)
	port := m.forwardSSH()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", adminConfig("node-1", key.authorized, ""))))
	if s := expectStatus(ctx, t, vm, "provisioned", "failed"); s.State != "provisioned" {
		t.Fatalf("status %+v", s)
	}
	ssh := dialSSH(ctx, t, port, key)
	ssh.run("systemctl is-active terrarium-registry.service containerd.service")
	for _, img := range images {
		ssh.run("sudo ctr -n test images pull --hosts-dir /etc/containerd/certs.d " + img)
	}
	listed := ssh.output("sudo ctr -n test images ls", regexp.MustCompile(`REF\s+TYPE`))
	for _, img := range images {
		assert.Contains(t, listed, img, "containerd's images after the pull")
	}
	coredns := images[1]
	out := ssh.output("sudo ctr -n test run --rm "+coredns+" version-{try} /coredns -version", regexp.MustCompile(`CoreDNS-`))
	require.Contains(t, out, "CoreDNS-", "the coredns container's output")
	// Never the upstream: a name no bundle carries fails, and fast.
	if out, err := ssh.try("sudo timeout 60 ctr -n test images pull --hosts-dir /etc/containerd/certs.d registry.k8s.io/not-bundled:1.0"); err == nil {
		t.Fatalf("pull of an unbundled image succeeded: %s", out)
	}
	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	n := checkCapture(t, m.capture, testSubnet)
	t.Logf("network capture: %d packets, all inside %s", n, testSubnet)
}
