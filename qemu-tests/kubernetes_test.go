package qemutests

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/image/pins"
)

// TestKubernetesFromSource boots the default image on a network with no
// route out and checks that the node programs built from the pinned
// sources report the pinned versions, that every image `kubeadm config
// images list` names is pullable through the node's registry cache, and
// that etcd and kube-apiserver run from those images.
func TestKubernetesFromSource(t *testing.T) {
	v, err := pins.Load("../components")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	key := newSSHKey(t)
	port := m.forwardSSH()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", adminConfig("node-1", key.authorized, ""))))
	if s := expectStatus(ctx, t, vm, "provisioned", "failed"); s.State != "provisioned" {
		t.Fatalf("status %+v", s)
	}
	ssh := dialSSH(ctx, t, port, key)

	versions := []struct{ cmd, want string }{
		{"kubelet --version", "Kubernetes " + v.Kubernetes},
		{"kubeadm version -o short", v.Kubernetes},
		{"kubectl version --client", "Client Version: " + v.Kubernetes},
		{"containerd --version", v.Containerd},
		{"/usr/sbin/runc --version", "runc version " + strings.TrimPrefix(v.Runc, "v")},
	}
	for _, c := range versions {
		out := ssh.output(c.cmd, regexp.MustCompile(regexp.QuoteMeta(c.want)))
		if !strings.Contains(out, c.want) {
			t.Errorf("%s printed %q, want %q in it", c.cmd, out, c.want)
		}
	}

	// kubeadm names the images itself: nothing here is hard-coded.
	listCmd := "kubeadm config images list --kubernetes-version " + v.Kubernetes
	listed := ssh.output(listCmd, regexp.MustCompile(`registry\.k8s\.io/pause:`))
	images := regexp.MustCompile(`(?m)^registry\.k8s\.io/\S+`).FindAllString(listed, -1)
	if len(images) < 7 {
		t.Fatalf("%s listed %d images:\n%s", listCmd, len(images), listed)
	}
	for _, img := range images {
		start := time.Now()
		ssh.run("sudo ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d " + img)
		t.Logf("pulled %s through the registry cache in %s", img, time.Since(start).Round(100*time.Millisecond))
	}

	runs := []struct{ image, cmd, want string }{
		{"registry.k8s.io/etcd:" + v.EtcdTag(), "etcd --version", "etcd Version: " + strings.TrimPrefix(v.Etcd, "v")},
		{"registry.k8s.io/kube-apiserver:" + v.Kubernetes, "kube-apiserver --version", "Kubernetes " + v.Kubernetes},
	}
	for i, r := range runs {
		cmd := "sudo ctr -n k8s.io run --rm " + r.image + " version-" + string(rune('a'+i)) + "-{try} " + r.cmd
		out := ssh.output(cmd, regexp.MustCompile(regexp.QuoteMeta(r.want)))
		if !strings.Contains(out, r.want) {
			t.Errorf("%s in %s printed %q, want %q in it", r.cmd, r.image, out, r.want)
		}
	}
	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	n := checkCapture(t, m.capture, testSubnet)
	t.Logf("network capture: %d packets, all inside %s", n, testSubnet)
}
