package qemutests

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkBundleReadyVsImport measures, inside a booted appliance, how
// long after its start the node's registry makes every bundle image
// pullable (systemd's exec → READY=1 of terrarium-registry.service; at boot,
// when every service starts at once, and again on a restart once the boot
// settled), and, as the k3s-style baseline on the same machine in the same
// settled conditions, how long `ctr images import` of the same images (an
// OCI archive of the slot's bundle, on tmpfs) takes before they are usable.
// The ratio compares the settled figures.
func BenchmarkBundleReadyVsImport(b *testing.B) {
	image := fixture(b, "TERRARIUM_IMAGE")
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
		m := newMachine(b, image)
		key := newSSHKey(b)
		port := m.forwardSSH()
		vm := m.boot(ctx, configAttached(m.configDisk("config.img", adminConfig("bench-1", key.authorized, ""))))
		if _, err := vm.Expect(ctx, statusProvisionedRE); err != nil {
			b.Fatal(err)
		}
		ssh := dialSSH(ctx, b, port, key)
		bootMs := registryReadyMs(b, ssh)
		// The same start again once the boot has settled, in the same
		// conditions as the import below.
		ssh.run("sudo systemctl restart terrarium-registry.service")
		readyMs := registryReadyMs(b, ssh)
		ssh.run("sudo tar -C /usr/lib/terrarium/bundle -cf /run/bundle.tar .")
		ssh.run(`sudo sh -c 's=$(date +%s%N); ctr -n k3s-style images import --all-platforms /run/bundle.tar >/dev/null; e=$(date +%s%N); echo $(( (e-s)/1000 )) > /run/import-us'`)
		out := ssh.output("cat /run/import-us", regexp.MustCompile(`^\s*\d+\s*$`))
		importUs, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			b.Fatalf("import timing %q: %v", out, err)
		}
		importMs := float64(importUs) / 1000
		for _, img := range slotImages(b) { // both ways really give usable images
			ssh.run("sudo ctr -n pulled images pull --hosts-dir /etc/containerd/certs.d " + img)
		}
		b.ReportMetric(bootMs, "ms-registry-ready-at-boot")
		b.ReportMetric(readyMs, "ms-registry-ready")
		b.ReportMetric(importMs, "ms-ctr-import")
		b.ReportMetric(importMs/readyMs, "x-faster")
		b.ReportMetric(0, "ns/op")
		if err := vm.Close(); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// registryReadyMs is systemd's view of the registry's last start: from
// exec to READY=1.
func registryReadyMs(b *testing.B, ssh *sshClient) float64 {
	props := ssh.output("sudo systemctl --no-pager show -p ExecMainStartTimestampMonotonic -p ActiveEnterTimestampMonotonic terrarium-registry.service",
		regexp.MustCompile(`ActiveEnterTimestampMonotonic=\d+`))
	start, ready := monotonic(b, props, "ExecMainStartTimestampMonotonic"), monotonic(b, props, "ActiveEnterTimestampMonotonic")
	return float64(ready-start) / 1000
}

func monotonic(b *testing.B, props, key string) int64 {
	for _, line := range strings.Split(props, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil && n > 0 {
				return n
			}
		}
	}
	b.Fatalf("no %s in:\n%s", key, props)
	return 0
}
