package qemutests

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/pins"
)

// TestKubernetesFromSource boots the default image on a network with no
// route out and checks that the node programs built from the pinned
// sources report the pinned versions; that containerd holds every bundled
// image from the boot on, registered before it started, with no layer in
// its content store; that every image `kubeadm config
// images list` names, and the bundle's others (flannel's, from docker.io),
// is fetched whole (every layer, every digest checked) by its upstream name
// through the hosts.toml mirrors, which
// the node's own registry serves, while a name no bundle carries fails,
// and fast; that etcd and kube-apiserver run from those images; and that
// the capture shows no packet leaving the test network.
func TestKubernetesFromSource(t *testing.T) {
	t.Parallel()
	v, err := pins.Load("../components")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	key := newSSHKey(t)
	port := m.forwardSSH()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", adminConfig("node-1", key.authorized, ""))))
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s.State, "%+v", s)
	ssh := dialSSH(ctx, t, port, key)
	ssh.run("systemctl is-active terrarium-registry.service containerd.service")

	versions := []struct{ cmd, want string }{
		{"kubelet --version", "Kubernetes " + v.Kubernetes},
		{"kubeadm version -o short", v.Kubernetes},
		{"kubectl version --client", "Client Version: " + v.Kubernetes},
		{"containerd --version", v.Containerd},
		{"/usr/sbin/runc --version", "runc version " + strings.TrimPrefix(v.Runc, "v")},
	}
	for _, c := range versions {
		out := ssh.output(c.cmd, regexp.MustCompile(regexp.QuoteMeta(c.want)))
		assert.Contains(t, out, c.want, c.cmd)
	}

	// kubeadm names the images itself: nothing here is hard-coded.
	listCmd := "kubeadm config images list --kubernetes-version " + v.Kubernetes
	// Through a pipe, not the pty: once the pty gave the list behind a run
	// of NUL bytes, and its first image was not read.
	listed, err := ssh.read(listCmd)
	require.NoError(t, err, "%s: %s", listCmd, listed)
	images := regexp.MustCompile(`(?m)^registry\.k8s\.io/\S+`).FindAllString(listed, -1)
	require.GreaterOrEqual(t, len(images), 7, "%s listed:\n%s", listCmd, listed)
	for _, img := range slotImages(t) {
		if !slices.Contains(images, img) {
			images = append(images, img)
		}
	}
	// From the boot on, before any pull, containerd's Kubernetes namespace
	// holds every bundled image: the snapshotter's service registered them
	// before containerd started (pkg/node/images/imageseed), with their manifests
	// and configs alone in the content store, no layer fetched or unpacked.
	seeded, err := ssh.read("sudo ctr -n k8s.io images ls -q")
	require.NoError(t, err, "ctr images ls: %s", seeded)
	for _, img := range images {
		assert.Contains(t, strings.Fields(seeded), img, "registered at boot, before any pull")
	}
	seededContent, err := ssh.read("sudo ctr -n k8s.io content ls")
	require.NoError(t, err, "ctr content ls: %s", seededContent)
	require.Regexp(t, `(?m)^DIGEST\s+SIZE`, seededContent)
	assert.NotRegexp(t, `containerd\.io/uncompressed=|\d\s?MB\b`, seededContent, "no layer in the store after the boot:\n%s", seededContent)
	seedLog, err := ssh.read("sudo journalctl -b -u terrarium-snapshotter -o short-monotonic")
	require.NoError(t, err)
	seedLine := regexp.MustCompile(`[^\n]*images registered in containerd's store[^\n]*`).FindString(seedLog)
	assert.Regexp(t, `seeded=\d+ present=0 skipped=map\[\]`, seedLine, "the snapshotter's log:\n%s", seedLog)
	t.Logf("snapshotter: %s", seedLine)

	// Every image whole through the registry cache to a real client, which
	// checks every blob's digest: fetched, layers and all. Not unpacked
	// (decompression is containerd's own work, seconds an image under
	// TCG); the two run below are unpacked for their runs.
	for _, img := range images {
		start := time.Now()
		ssh.run("sudo ctr -n k8s.io content fetch --hosts-dir /etc/containerd/certs.d " + img)
		t.Logf("fetched %s through the registry cache in %s", img, time.Since(start).Round(100*time.Millisecond))
	}
	fetched := ssh.output("sudo ctr -n k8s.io images ls", regexp.MustCompile(`REF\s+TYPE`))
	for _, img := range images {
		assert.Contains(t, fetched, img, "containerd's images after the fetch")
	}
	// Never the upstream: a name no bundle carries fails, and fast.
	refused, err := ssh.try("sudo timeout 60 ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d registry.k8s.io/not-bundled:1.0")
	require.Error(t, err, "pull of an unbundled image succeeded: %s", refused)

	runs := []struct{ image, cmd, want string }{
		{"registry.k8s.io/etcd:" + v.EtcdTag(), "etcd --version", "etcd Version: " + strings.TrimPrefix(v.Etcd, "v")},
		{"registry.k8s.io/kube-apiserver:" + v.Kubernetes, "kube-apiserver --version", "Kubernetes " + v.Kubernetes},
	}
	for i, r := range runs {
		cmd := "sudo ctr -n k8s.io run --rm " + r.image + " version-" + string(rune('a'+i)) + "-{try} " + r.cmd
		out := ssh.output(cmd, regexp.MustCompile(regexp.QuoteMeta(r.want)))
		assert.Contains(t, out, r.want, "%s in %s", r.cmd, r.image)
	}

	// The node's snapshotter, as the kubelet's pulls use it: the bundled
	// images need no layer fetched or unpacked. In a namespace of its own,
	// the content store then holds their manifests and configs only, every
	// snapshot links into the slot, and a container runs from them.
	const ns = "slot-layers"
	for _, img := range images {
		start := time.Now()
		ssh.run("sudo ctr -n " + ns + " images pull --snapshotter terrarium --hosts-dir /etc/containerd/certs.d " + img)
		t.Logf("pulled %s with the slot's layers in %s", img, time.Since(start).Round(100*time.Millisecond))
	}
	// A layer fetched carries megabytes, and once unpacked containerd's
	// uncompressed label; manifests and configs neither. The fetches and
	// runs above (the default snapshotter, in k8s.io) show both, so the
	// check can fail.
	unpacked := regexp.MustCompile(`containerd\.io/uncompressed=|\d\s?MB\b`)
	whole := regexp.MustCompile(`DIGEST\s+SIZE[^\n]*\n\s*sha256:`) // the listing came whole through sudo's pty
	assert.Regexp(t, unpacked, ssh.output("sudo ctr -n k8s.io content ls", whole), "the fetches through the registry cache brought layers")
	content := ssh.output("sudo ctr -n "+ns+" content ls", whole)
	require.Regexp(t, whole, content)
	assert.NotRegexp(t, unpacked, content, "no layer fetched:\n%s", content)
	slotLink := regexp.MustCompile(`(?m)^/usr/lib/terrarium/layers/sha256/[0-9a-f]{64}\r?$`)
	links := ssh.output("sudo find /var/lib/terrarium/snapshotter/snapshots -maxdepth 2 -name fs -type l -printf '%l\\n'", slotLink)
	assert.Regexp(t, slotLink, links, "snapshots link into the slot")
	r := runs[1]
	out := ssh.output("sudo ctr -n "+ns+" run --snapshotter terrarium --rm "+r.image+" slot-{try} "+r.cmd, regexp.MustCompile(regexp.QuoteMeta(r.want)))
	assert.Contains(t, out, r.want, "%s from the slot's layers", r.image)

	require.NoError(t, vm.Quit(ctx))
	n := checkCapture(t, m.capture, testSubnet)
	t.Logf("network capture: %d packets, all inside %s", n, testSubnet)
}
