//go:build e2e

package qemutests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// TestClusterBackupRestore: disaster recovery of a one-control-plane
// cluster whose backups carry the nodes' volumes (--backup-volumes). The
// cluster forms and runs a workload (a ConfigMap, a Deployment of a
// bundled image on the worker, a StatefulSet with a volume there); a
// TERRA-BACKUP stick inserted into the control plane receives the
// cluster's encrypted backup, then, inserted into the worker, the
// worker's volumes. Then every VM is destroyed with its disks. A new
// control plane, booted from the image with the old control plane's
// config disk and the backup stick, restores etcd from it; a new worker
// with the old worker's config disk and the stick restores its volumes
// and joins; the ConfigMap is there, the Deployment runs again on the
// worker, and the StatefulSet's volume holds what was written. Every
// packet stays inside the test networks.
func TestClusterBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	// The tests' image (make test-image): its Deployment runs one of the
	// test applications.
	image, bin := fixture(t, "TERRARIUM_TEST_IMAGE"), fixture(t, "TERRARIUM_BIN")
	work := t.TempDir()
	topology := []string{"--control-plane", "cp-1=10.77.0.10@52:54:00:77:00:10", "--worker", "w-1=10.77.0.20@52:54:00:77:00:20", "--backup-volumes"}
	key, configs := clusterConfigs(ctx, t, "e2e-dr", topology...)
	secrets := filepath.Join(configs, "secrets.yaml")

	// generation makes and boots a fresh pair of VMs (new disks from the
	// image) with the cluster's config disks and, on both, extra disks.
	linkPort := freePort(t)
	generation := func(gen int, extra ...qemu.Disk) (cp, w *clusterNode, start time.Time) {
		cp = &clusterNode{name: "cp-1", ip: "10.77.0.10", linkMAC: "52:54:00:77:00:10", mgmtMAC: "52:54:00:00:00:10"}
		w = &clusterNode{name: "w-1", ip: "10.77.0.20", linkMAC: "52:54:00:77:00:20", mgmtMAC: "52:54:00:00:00:20"}
		for _, n := range []*clusterNode{cp, w} {
			n.m = newMachine(t, image)
			n.m.mac, n.m.memMiB = n.mgmtMAC, 3072
			cfg := withManagementNIC(t, filepath.Join(configs, n.name+".yaml"), n.mgmtMAC)
			if n == w {
				n.m.yieldCPU()
				cfg = withVolumeDisk(t, cfg, workerVolumeDisk)
			}
			n.sshPort = n.m.forwardSSH()
			n.disk = n.m.configDisk("config.img", cfg)
		}
		// The worker's volume area is a whole disk of its own, new and
		// empty on each generation's machine.
		dataDisk := filepath.Join(work, fmt.Sprintf("w-1-data-%d.qcow2", gen))
		out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", dataDisk, "2G").CombinedOutput()
		require.NoError(t, err, "qemu-img create: %s", out)
		data := qemu.Disk{ID: "data", Path: dataDisk, Format: "qcow2", Serial: workerVolumeDisk}
		w.m.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: w.linkMAC,
			Capture: filepath.Join(work, fmt.Sprintf("link-%d.pcap", gen))}
		cp.m.link = &qemu.Network{Mode: qemu.NetConnect, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: cp.linkMAC}
		start = time.Now()
		w.vm = w.m.boot(ctx, append([]qemu.Disk{configAttached(w.disk), data}, extra...)...)
		cp.vm = cp.m.boot(ctx, append([]qemu.Disk{configAttached(cp.disk)}, extra...)...)
		return cp, w, start
	}
	destroy := func(nodes ...*clusterNode) {
		for _, n := range nodes {
			cutPower(ctx, t, n.vm)
			require.NoError(t, os.Remove(n.m.disk), "the VM's disk is destroyed with it")
			if n.name == "w-1" {
				require.NoError(t, os.Remove(filepath.Join(work, "w-1-data-1.qcow2")), "and its volume disk")
			}
		}
	}

	// The cluster and its workload.
	cp, w, start := generation(1)
	waitHealthy(ctx, t, start, "provisioned", "provisioned and healthy", cp, w)
	shareCPU(t, cp, w)
	ssh := dialSSH(ctx, t, cp.sshPort, key)
	const drSecret = "plant-7-line-password"
	workload := `apiVersion: v1
kind: ConfigMap
metadata: {name: dr-check, namespace: default}
data: {plant: "7", line: assembly}
---
apiVersion: v1
kind: Secret
metadata: {name: dr-secret, namespace: default}
stringData: {value: ` + drSecret + `}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: sleeper, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: sleeper}}
  template:
    metadata: {labels: {app: sleeper}}
    spec:
      nodeSelector: {kubernetes.io/hostname: w-1}
      containers:
        - name: sleeper
          image: quay.io/terrarium/sleeper:1.0
`
	ssh.run("cat > /tmp/workload.yaml <<'EOF'\n" + workload + "EOF\nkubectl apply -f /tmp/workload.yaml")
	ssh.run("kubectl rollout status --timeout=10m deployment/sleeper")
	wSSH := dialSSH(ctx, t, w.sshPort, key)
	vol, ok := checkLocalStorage(t, ssh, wSSH, w.name, workerVolumeDisk)
	require.True(t, ok, "the StatefulSet's volume on the worker")
	t.Logf("workload running:\n%s", ssh.run("kubectl get pods -o wide"))

	// The backup: a TERRA-BACKUP stick inserted into the running control
	// plane, and `firstboot backup` on it.
	stick := filepath.Join(work, "backup.img")
	d, err := diskfs.Create(stick, 512<<20, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	_, err = d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat32, VolumeLabel: "TERRA-BACKU"})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.NoError(t, cp.vm.HotplugDisk(ctx, qemu.Disk{ID: "backup", Path: stick, Format: "raw", Bus: qemu.BusUSB}))
	m, err := cp.vm.Expect(ctx, regexp.MustCompile(`backup: wrote \S*/(terrarium-backup-\S+\.age) \((\d+) KiB\) of a fresh snapshot to the TERRA-BACKUP stick`))
	require.NoError(t, err, "no backup written to the stick")
	// The control plane's own volumes (none) come with it.
	cpVolumes, err := cp.vm.Expect(ctx, regexp.MustCompile(`backup: wrote \S*/(terrarium-volumes-e2e-dr-cp-1-\S+\.age) \((\d+) KiB\) of 0 volumes, 0 files to the TERRA-BACKUP stick; it may be removed`))
	require.NoError(t, err, "no volume backup of the control plane on the stick")
	require.NoError(t, cp.vm.UnplugDisk(ctx, "backup"))
	t.Logf("backup on the stick: %s, %s KiB; %s, %s KiB", m[1], m[2], cpVolumes[1], cpVolumes[2])

	// The worker's volumes: the same stick inserted into it.
	require.NoError(t, w.vm.HotplugDisk(ctx, qemu.Disk{ID: "backup", Path: stick, Format: "raw", Bus: qemu.BusUSB}))
	wVolumes, err := w.vm.Expect(ctx, regexp.MustCompile(`backup: wrote \S*/(terrarium-volumes-e2e-dr-w-1-\S+\.age) \((\d+) KiB\) of 1 volumes, (\d+) files to the TERRA-BACKUP stick; it may be removed`))
	require.NoError(t, err, "no volume backup of the worker on the stick")
	require.NoError(t, w.vm.UnplugDisk(ctx, "backup"))
	t.Logf("the worker's volumes on the stick: %s, %s KiB, %s files", wVolumes[1], wVolumes[2], wVolumes[3])
	// Its output through files, not sudo's pty, which now and then loses
	// it.
	cli, err := ssh.sudoTry("firstboot backup --dir /tmp/backups && ls -l /tmp/backups /var/lib/terrarium/etcd-snapshots")
	require.NoError(t, err, "%s", cli)
	assert.Regexp(t, `terrarium-backup-e2e-dr-cp-1-\d{8}T\d{6}Z\.age`, cli)
	t.Logf("firstboot backup:\n%s", cli)

	// The operator can open it with the secrets file alone.
	v, err := volume.Open(stick)
	require.NoError(t, err)
	data, err := v.ReadFile(m[1], 1<<30)
	require.NoError(t, err)
	require.NoError(t, v.Close())
	local := filepath.Join(work, m[1])
	require.NoError(t, os.WriteFile(local, data, 0o600))
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "config", "backup-open", "--secrets", secrets, "-o", filepath.Join(work, "opened"), local).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "cluster e2e-dr")
	assert.FileExists(t, filepath.Join(work, "opened", backup.SnapshotName))
	t.Logf("imagebuild config backup-open: %s", strings.TrimSpace(string(out)))

	// And the worker's volumes, with the token the StatefulSet wrote.
	v, err = volume.Open(stick)
	require.NoError(t, err)
	data, err = v.ReadFile(wVolumes[1], 1<<30)
	require.NoError(t, err)
	require.NoError(t, v.Close())
	local = filepath.Join(work, wVolumes[1])
	require.NoError(t, os.WriteFile(local, data, 0o600))
	out, err = exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "config", "backup-open", "--secrets", secrets, "-o", filepath.Join(work, "volumes"), local).CombinedOutput()
	require.NoError(t, err, "%s", out)
	token, err := os.ReadFile(filepath.Join(work, "volumes", filepath.Base(vol.path), "token"))
	require.NoError(t, err, "%s", out)
	assert.Equal(t, vol.token, strings.TrimSpace(string(token)), "the operator reads the volume from the backup")
	t.Logf("imagebuild config backup-open: %s", strings.TrimSpace(string(out)))

	// The secrets encryption key is rotated after the backup
	// (docs/security.md#rotating-the-key): the Secret, stored with the
	// first key, is rewritten with the new one, and kube-apiserver stops
	// reading the old key.
	firstKey := secretsKeyName(t, secrets)
	require.Equal(t, firstKey, etcdSecretKey(t, ssh, "default", "dr-secret", drSecret))
	oldKey, newKey := rotateSecretsKey(ctx, t, cp, configs, "e2e-dr", topology...)
	require.Equal(t, firstKey, oldKey)
	ssh = dialSSH(ctx, t, cp.sshPort, key)
	assert.Equal(t, newKey, etcdSecretKey(t, ssh, "default", "dr-secret", drSecret), "the Secret is rewritten with the new key")
	checkRetiredKeyGone(t, ssh, oldKey, newKey)
	// Through the API, which may still be settling after the rotation's
	// restarts under TCG (once, half a minute after the rotation said
	// done, a read through the local balancer was reset), and through the
	// pty, which now and then loses a command's output while its exit
	// status comes back 0: read until the value comes back, a few tries.
	readSecret := func(ssh *sshClient) string {
		t.Helper()
		out := ssh.output("kubectl get secret dr-secret -o jsonpath='{.data.value}' | base64 -d; echo", regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(drSecret)+`$`))
		return strings.TrimSpace(out)
	}
	assert.Equal(t, drSecret, readSecret(ssh))

	// Disaster: every VM and its disks are gone.
	destroy(w, cp)

	// A new control plane with the old config disk and the backup stick;
	// a new worker with the old worker's config disk.
	cp, w, start = generation(2, qemu.Disk{ID: "backup", Path: stick, Format: "raw", Bus: qemu.BusUSB, ReadOnly: true})
	restored, err := cp.vm.Expect(ctx, regexp.MustCompile(`restore etcd from a backup: restored: ([^\n]*)`))
	require.NoError(t, err, "the new control plane did not restore from the stick")
	t.Logf("%s: restored %s, %s after power-on", cp.name, restored[1], time.Since(start).Round(time.Second))
	restored, err = w.vm.Expect(ctx, regexp.MustCompile(`restore volumes from a backup: restored: (1 volumes[^\n]*)`))
	require.NoError(t, err, "the new worker did not restore its volumes from the stick")
	t.Logf("%s: restored %s, %s after power-on", w.name, restored[1], time.Since(start).Round(time.Second))
	waitHealthy(ctx, t, start, "provisioned", "provisioned and healthy", cp, w)
	shareCPU(t, cp, w)
	// The new worker waited out its predecessor's Node (Ready in the
	// snapshot) instead of failing its kubelet start, which refuses a
	// name whose Node is Ready, as kubeadm's kubelet-start does.
	if m := regexp.MustCompile(`wait for an old Node of this name: (waiting|gone): [^\n]*`).FindAllString(w.vm.Console(), -1); len(m) > 0 {
		t.Logf("%s: %s", w.name, strings.Join(m, "; "))
	}
	assert.NotContains(t, w.vm.Console(), "kubelet start: retry", "the worker's name was refused")

	// The backup predates the rotation: its Secrets are encrypted with
	// the old key, which the rotated configs keep as retired; the new
	// control plane reads them and writes them again with the new key.
	expect(ctx, t, cp.vm, `secrets encryption: done: every Secret is written with `+newKey+`; kube-apiserver no longer reads the retired keys `+oldKey)
	ssh = dialSSH(ctx, t, cp.sshPort, key)
	assert.Equal(t, drSecret, readSecret(ssh), "the Secret came back from the backup")
	assert.Equal(t, newKey, etcdSecretKey(t, ssh, "default", "dr-secret", drSecret), "the restored Secret is rewritten with the new key")
	// With retries too: this read once came back "" with the ConfigMap
	// there.
	cm := ssh.output("kubectl get configmap dr-check -o jsonpath='{.data.plant}/{.data.line}{\"\\n\"}'", regexp.MustCompile(`(?m)^\S*/\S*\s*$`))
	assert.Equal(t, "7/assembly", strings.TrimSpace(cm), "the ConfigMap came back from the backup")
	ssh.run("kubectl rollout status --timeout=15m deployment/sleeper")
	pods := ssh.output("kubectl get pods -l app=sleeper -o wide", regexp.MustCompile(`sleeper-\S+\s+1/1\s+Running.*w-1`))
	assert.Regexp(t, `sleeper-\S+\s+1/1\s+Running.*w-1`, pods, "the Deployment runs on the rejoined worker")
	checkLocalVolumeKept(t, ssh, dialSSH(ctx, t, w.sshPort, key), w.name, vol, "the restore of "+w.name+" onto a new machine")
	nodes := ssh.output("kubectl get nodes", regexp.MustCompile(`(?s)cp-1\s+Ready.*w-1\s+Ready`))
	assert.Regexp(t, `(?s)cp-1\s+Ready.*w-1\s+Ready`, nodes)
	t.Logf("after the restore, %s after power-on:\n%s\n%s", time.Since(start).Round(time.Second), nodes, pods)

	for _, n := range []*clusterNode{cp, w} {
		require.NoError(t, n.vm.Quit(ctx))
	}
	for gen := 1; gen <= 2; gen++ {
		c := filepath.Join(work, fmt.Sprintf("link-%d.pcap", gen))
		t.Logf("cluster link capture %s: %d packets, all inside %s", filepath.Base(c), checkCapture(t, c, clusterSubnet), clusterSubnet)
	}
}
