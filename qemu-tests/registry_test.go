package qemutests

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// bundleImages are the images of bundles/test-apps.yaml, which the default
// image carries (upstream names on three different registry hosts).
var bundleImages = []string{"docker.io/library/hello:1.0", "ghcr.io/terrarium-os/echo:1.0", "quay.io/terrarium/sleeper:1.0"}

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
// every bundle image by its upstream name through the hosts.toml mirrors
// (served by the node's own registry), a container from one of them runs,
// and the capture shows no packet leaving the test network.
func TestRegistryAirGapped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	key := newSSHKey(t)
	port := m.forwardSSH()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", adminConfig("node-1", key.authorized, ""))))
	if s := expectStatus(ctx, t, vm, "provisioned", "failed"); s.State != "provisioned" {
		t.Fatalf("status %+v", s)
	}
	ssh := dialSSH(ctx, t, port, key)
	ssh.run("systemctl is-active terrarium-registry.service containerd.service")
	for _, img := range bundleImages {
		ssh.run("sudo ctr -n test images pull --hosts-dir /etc/containerd/certs.d " + img)
	}
	listed := ssh.output("sudo ctr -n test images ls", regexp.MustCompile(`REF\s+TYPE`))
	for _, img := range bundleImages {
		if !strings.Contains(listed, img) {
			t.Errorf("containerd lacks %s after the pull; it has:\n%s", img, listed)
		}
	}
	out := ssh.output("sudo ctr -n test run --rm docker.io/library/hello:1.0 hello-{try}", regexp.MustCompile(`hello from terrarium`))
	if !strings.Contains(out, "hello from terrarium") {
		t.Fatalf("container output = %q, want the greeting", out)
	}
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
