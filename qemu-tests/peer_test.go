package qemutests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// testPKI is a throwaway CA and a registry certificate for one node IP
// (the cluster CA of a real cluster comes from `imagebuild config cluster`).
type testPKI struct{ ca, cert, key string }

func newTestPKI(t *testing.T, ip string) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "terrarium-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "registry"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	return testPKI{
		ca:   string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		cert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		key:  string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
	}
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n"+pad)
}

// linkConfig is a node on the management network (DHCP, for SSH) and on
// the private cluster link (static), with a registry section.
func linkConfig(host, key, linkMAC, linkAddr, registry string) string {
	return `apiVersion: terrarium.dev/v1alpha1
kind: MachineConfig
hostname: ` + host + `
network:
  interfaces:
    - macAddress: 52:54:00:00:00:` + linkMAC[len(linkMAC)-2:] + `
      dhcp: true
    - macAddress: ` + linkMAC + `
      dhcp: false
      addresses: [` + linkAddr + `]
admin:
  name: admin
  sshAuthorizedKeys:
    - ` + key + `
registry:
` + registry
}

// TestPeerPull: a worker pulls an image that only the control-plane node
// has — side-loaded there from a TERRA-BUNDLE disk — through the peer
// registry over TLS on a private link between the two VMs.
func TestPeerPull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*bootTimeout)
	defer cancel()
	image, bin := fixture(t, "TERRARIUM_IMAGE"), fixture(t, "TERRARIUM_BIN")
	bundleDisk := filepath.Join(t.TempDir(), "bundle.img")
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "bundle", "disk", "../bundles/sideload-test.yaml", "-o", bundleDisk).CombinedOutput(); err != nil {
		t.Fatalf("imagebuild bundle disk: %v\n%s", err, out)
	}
	pki := newTestPKI(t, "10.77.0.11")
	key := newSSHKey(t)
	linkPort := freePort(t)
	linkCap := filepath.Join(t.TempDir(), "link.pcap")

	cp, worker := newMachine(t, image), newMachine(t, image)
	cp.mac, worker.mac = "52:54:00:00:00:11", "52:54:00:00:00:12"
	cp.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: "52:54:00:77:00:11", Capture: linkCap}
	worker.link = &qemu.Network{Mode: qemu.NetConnect, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: "52:54:00:77:00:12"}
	cpPort, workerPort := cp.forwardSSH(), worker.forwardSSH()
	cpReg := fmt.Sprintf("  serve: true\n  listen: 10.77.0.11:5443\n  ca: |\n%s\n  certificate: |\n%s\n  key: |\n%s\n", indent(pki.ca, 4), indent(pki.cert, 4), indent(pki.key, 4))
	wReg := fmt.Sprintf("  peers: [10.77.0.11:5443]\n  ca: |\n%s\n", indent(pki.ca, 4))
	cpCfg := cp.configDisk("config.img", linkConfig("cp-1", key.authorized, "52:54:00:77:00:11", "10.77.0.11/24", cpReg))
	wCfg := worker.configDisk("config.img", linkConfig("worker-1", key.authorized, "52:54:00:77:00:12", "10.77.0.12/24", wReg))

	cpVM := cp.boot(ctx, configAttached(cpCfg), qemu.Disk{ID: "bundle", Path: bundleDisk, Format: "raw", ReadOnly: true})
	wVM := worker.boot(ctx, configAttached(wCfg))
	var wg sync.WaitGroup
	for _, vm := range []*qemu.VM{cpVM, wVM} {
		wg.Add(1)
		go func(vm *qemu.VM) {
			defer wg.Done()
			if _, err := vm.Expect(ctx, statusProvisionedRE); err != nil {
				t.Errorf("waiting for provisioned: %v", err)
			}
		}(vm)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The side-load may finish before or after provisioning: look at the
	// whole console, not just what follows the status line.
	seen(ctx, t, cpVM, regexp.MustCompile(`bundle disk \S+ added 1 images to the cache`))

	w := dialSSH(ctx, t, workerPort, key)
	// The worker's image does not carry this image (only test-apps); the
	// pull by its upstream name succeeds through the peer.
	w.run("sudo ctr -n test images pull --hosts-dir /etc/containerd/certs.d quay.io/terrarium/sideloaded:1.0")
	if out := w.output("sudo ctr -n test images ls", regexp.MustCompile(`REF\s+TYPE`)); !strings.Contains(out, "quay.io/terrarium/sideloaded:1.0") {
		t.Fatalf("worker's containerd lacks the side-loaded image after the pull:\n%s", out)
	}
	c := dialSSH(ctx, t, cpPort, key)
	c.run("systemctl is-active terrarium-registry.service")
	for _, vm := range []*qemu.VM{cpVM, wVM} {
		if err := vm.Quit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	linkNet := &net.IPNet{IP: net.IPv4(10, 77, 0, 0), Mask: net.CIDRMask(24, 32)}
	if n := checkCapture(t, linkCap, linkNet); n == 0 {
		t.Error("no packets on the cluster link: the worker did not use the peer")
	}
	checkCapture(t, cp.capture, testSubnet)
	checkCapture(t, worker.capture, testSubnet)
}
