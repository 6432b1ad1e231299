//go:build e2e

package qemutests

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Bounds of checkLocalStorage's waits.
const (
	storageProvisionerTimeout = 10 * time.Minute // the provisioner's Deployment running
	// The claim Bound once its pod is scheduled: the provisioner starts a
	// helper pod on the pod's node, which takes as long as any pod start
	// there, so the bound is a pod start's. A starved worker under TCG
	// took 3 minutes from the helper pod's creation to its start.
	storageBoundTimeout = storagePodTimeout
	storagePodTimeout   = 10 * time.Minute // the pod Ready (after a power cut: its node back)
	storagePollEvery    = time.Second
)

// The StatefulSet checkLocalStorage makes in default, and its claim.
const (
	storageApp   = "e2e-data"
	storageClaim = "data-" + storageApp + "-0"
	storagePod   = storageApp + "-0"
	storageFile  = "/data/token"
)

// localVolume is what checkLocalStorage wrote, for checkLocalVolumeKept:
// the token, the volume's directory, and the serial of the disk that is
// the node's volume area ("" for the file on TERRA-STATE).
type localVolume struct {
	token, path, diskSerial string
}

// checkLocalStorage: the cluster's default StorageClass (local-path,
// docs/workloads.md) gives a StatefulSet's claim a volume in the volume
// area of node, the node its pod runs on. It logs how long the claim took
// from creation to Bound, writes a random token into the volume and
// returns it. nodeSSH is node's own shell: the volume area is mounted
// there (ext4, nodev, nosuid) and holds the volume's directory; it is the
// disk of serial diskSerial, or ("") the file on TERRA-STATE.
func checkLocalStorage(t *testing.T, ssh, nodeSSH *sshClient, node, diskSerial string) (localVolume, bool) {
	t.Helper()
	if out, err := ssh.read("kubectl -n kube-system rollout status deployment/local-path-provisioner --timeout=" + storageProvisionerTimeout.String()); err != nil {
		t.Errorf("local-path-provisioner does not run: %v\n%s", err, out)
		return localVolume{}, false
	}
	if out, err := ssh.read("kubectl get storageclass"); err != nil || !regexp.MustCompile(`local-path \(default\)\s+rancher.io/local-path\s+Delete\s+WaitForFirstConsumer`).MatchString(out) {
		t.Errorf("local-path is not the default StorageClass: %v\n%s", err, out)
		return localVolume{}, false
	}
	image := flannelImage(t, ssh)
	if image == "" {
		return localVolume{}, false
	}
	// No storageClassName: the default's. No nodeName, which would pass
	// the scheduler by and leave a WaitForFirstConsumer claim Pending.
	manifest := `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: ` + storageApp + `}
spec:
  serviceName: ` + storageApp + `
  replicas: 1
  selector: {matchLabels: {app: ` + storageApp + `}}
  template:
    metadata: {labels: {app: ` + storageApp + `}}
    spec:
      nodeSelector: {kubernetes.io/hostname: ` + node + `}
      terminationGracePeriodSeconds: 1
      containers:
        - name: app
          image: ` + image + `
          command: [busybox, sleep, "86400"]
          volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        accessModes: [ReadWriteOnce]
        resources: {requests: {storage: 64Mi}}
`
	start := time.Now()
	if out, err := ssh.read("cat > /tmp/" + storageApp + ".yaml <<'EOF'\n" + manifest + "EOF\nkubectl apply -f /tmp/" + storageApp + ".yaml"); err != nil {
		t.Errorf("kubectl apply StatefulSet %s: %v\n%s", storageApp, err, out)
		return localVolume{}, false
	}
	var created, bound time.Time
	for deadline := time.Now().Add(storageBoundTimeout); ; time.Sleep(storagePollEvery) {
		out, _ := ssh.read("kubectl get pvc " + storageClaim + " -o jsonpath='{.metadata.creationTimestamp} {.status.phase}'")
		if f := strings.Fields(out); len(f) == 2 {
			if created.IsZero() {
				created, _ = time.Parse(time.RFC3339, f[0])
			}
			if f[1] == "Bound" {
				bound = time.Now()
				break
			}
		}
		if time.Now().After(deadline) {
			desc, _ := ssh.read("kubectl describe pvc " + storageClaim +
				"; kubectl -n kube-system get pods -o wide; kubectl get events -A --sort-by=.lastTimestamp | tail -40" +
				"; kubectl -n kube-system logs -l app=local-path-provisioner --prefix --timestamps --tail=60" +
				"; kubectl -n kube-system logs -l app=local-path-provisioner --prefix --previous --tail=30")
			t.Errorf("claim %s not Bound within %s of the StatefulSet:\n%s", storageClaim, storageBoundTimeout, desc)
			return localVolume{}, false
		}
	}
	t.Logf("local storage: claim %s Bound %.1f s after the StatefulSet was applied (the API's creation stamp to Bound, seen from the host: %.0f s)",
		storageClaim, bound.Sub(start).Seconds(), bound.Sub(created).Seconds())
	if out, err := ssh.read("kubectl wait --for=condition=Ready --timeout=" + storagePodTimeout.String() + " pod/" + storagePod); err != nil {
		t.Errorf("pod %s with its volume not Ready: %v\n%s", storagePod, err, out)
		return localVolume{}, false
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	v := localVolume{token: hex.EncodeToString(b), diskSerial: diskSerial}
	if out, err := ssh.read("kubectl exec " + storagePod + " -- busybox sh -c 'echo " + v.token + " > " + storageFile + " && busybox sync && busybox cat " + storageFile + "'"); err != nil || strings.TrimSpace(out) != v.token {
		t.Errorf("write %s in %s's volume: %v\n%s", storageFile, storagePod, err, out)
		return localVolume{}, false
	}
	path, err := ssh.read("kubectl get pv $(kubectl get pvc " + storageClaim + " -o jsonpath='{.spec.volumeName}') -o jsonpath='{.spec.local.path}'")
	if v.path = strings.TrimSpace(path); err != nil || !strings.HasPrefix(v.path, "/var/lib/terrarium/volumes/pvc-") {
		t.Errorf("the volume of %s is not a local volume in the volume area: %v %q", storageClaim, err, path)
		return localVolume{}, false
	}
	checkVolumeOnNode(t, nodeSSH, node, v)
	return v, true
}

// checkVolumeOnNode: node's volume area is mounted (ext4, nodev, nosuid)
// from its file on TERRA-STATE, or from the whole disk of v.diskSerial,
// and holds v with its token.
func checkVolumeOnNode(t *testing.T, nodeSSH *sshClient, node string, v localVolume) {
	t.Helper()
	if v.diskSerial != "" {
		out, err := nodeSSH.sudoTry("findmnt -n -o SOURCE,FSTYPE,OPTIONS,LABEL /var/lib/terrarium/volumes; cat /sys/block/$(basename $(findmnt -n -o SOURCE /var/lib/terrarium/volumes))/serial; echo; cat " + v.path + "/token")
		if err != nil {
			t.Errorf("%s's volume disk: %v\n%s", node, err, out)
			return
		}
		if !regexp.MustCompile(`^/dev/vd[a-z]\s+ext4\s+\S*nosuid,nodev\S*\s+TERRA-VOLUMES`).MatchString(out) || !strings.Contains(out, v.diskSerial) || !strings.Contains(out, v.token) {
			t.Errorf("%s's volume area is not the whole disk %s (ext4, TERRA-VOLUMES) holding %s:\n%s", node, v.diskSerial, v.path, out)
			return
		}
		t.Logf("%s's volume area, a disk of its own:\n%s", node, strings.TrimSpace(out))
		return
	}
	out, err := nodeSSH.sudoTry("findmnt -n -o SOURCE,FSTYPE,OPTIONS,SIZE /var/lib/terrarium/volumes; losetup -n -O BACK-FILE -j /var/lib/terrarium/volumes.ext4; cat " + v.path + "/token")
	if err != nil {
		t.Errorf("%s's volume area: %v\n%s", node, err, out)
		return
	}
	if !regexp.MustCompile(`^/dev/loop\d+\s+ext4\s+\S*nosuid,nodev`).MatchString(out) || !strings.Contains(out, "/var/lib/terrarium/volumes.ext4") || !strings.Contains(out, v.token) {
		t.Errorf("%s's volume area is not the loop-mounted ext4 file holding %s:\n%s", node, v.path, out)
		return
	}
	t.Logf("%s's volume area:\n%s", node, strings.TrimSpace(out))
}

// withVolumeDisk makes the whole disk of serial the volume area of the
// node whose config yaml is (cluster.localStorage.disk).
func withVolumeDisk(t *testing.T, yaml, serial string) string {
	t.Helper()
	s := strings.Replace(yaml, "\ncluster:\n", "\ncluster:\n  localStorage:\n    disk:\n      serial: "+serial+"\n", 1)
	if s == yaml {
		t.Fatal("the config has no cluster section to give a volume disk")
	}
	return s
}

// checkLocalVolumeKept: after what happened to the node (a power cut, a
// restore onto a new machine), the StatefulSet's pod runs again on it with
// the token checkLocalStorage wrote.
func checkLocalVolumeKept(t *testing.T, ssh, nodeSSH *sshClient, node string, v localVolume, after string) {
	t.Helper()
	if out, err := ssh.read("kubectl wait --for=condition=Ready --timeout=" + storagePodTimeout.String() + " pod/" + storagePod); err != nil {
		t.Errorf("after %s, pod %s is not Ready: %v\n%s", after, storagePod, err, out)
		return
	}
	out, err := ssh.read("kubectl exec " + storagePod + " -- busybox cat " + storageFile)
	if err != nil || strings.TrimSpace(out) != v.token {
		t.Errorf("after %s, %s holds %q, not the token written before (%s): %v", after, storageFile, strings.TrimSpace(out), v.token, err)
		return
	}
	checkVolumeOnNode(t, nodeSSH, node, v)
	t.Logf("local storage: the volume's token is intact after %s", after)
}

// flannelImage is the image of the cluster's flannel, which every node has
// and which carries busybox: the image of the checks' own pods. "" (and
// the test marked failed) when it cannot be read.
func flannelImage(t *testing.T, ssh *sshClient) string {
	t.Helper()
	image, err := ssh.read("kubectl -n kube-flannel get daemonset kube-flannel-ds -o jsonpath='{.spec.template.spec.containers[0].image}'")
	if image = strings.TrimSpace(image); err != nil || image == "" {
		t.Errorf("flannel's image (the checks' busybox): %v %q", err, image)
		return ""
	}
	return image
}
