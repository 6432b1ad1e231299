package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// The kubernetes-upgrade phase. An OS upgrade brings a slot whose bundle,
// kubelet and kubeadm carry a newer Kubernetes than kubeadm configured the
// node for. Booted on trial, the node upgrades its part of the cluster
// with the new slot's kubeadm, its images served by the node's own
// registry from the new slot's bundle (never the internet):
//
//   - the first control plane to upgrade (the cluster's kubeadm
//     ClusterConfiguration still names the old version) takes an etcd
//     snapshot onto STATE, then runs `kubeadm upgrade apply VERSION`;
//   - every other node runs `kubeadm upgrade node`;
//
// each under the join lock on a control plane (one at a time), then
// restarts the kubelet. Before anything changes, the static pod manifests
// and the kubelet's configuration are copied onto STATE
// (layout.KubernetesBeforeUpgradeDir/<old version>), for the old slot to
// restore should the new one roll back. The Kubernetes kubeadm configured
// the node for is recorded in the journal (KubeadmProgress.Kubernetes).

// Files of kubeadm's a Kubernetes upgrade changes, kept before it.
const (
	ManifestsDir        = "/etc/kubernetes/manifests"
	KubeletConfigFile   = "/var/lib/kubelet/config.yaml"
	KubeletFlagsFile    = "/var/lib/kubelet/kubeadm-flags.env"
	kubeletInstanceFile = "/var/lib/kubelet/instance-config.yaml"
)

// errKubernetesBehind: the node is configured for an older Kubernetes than
// its slot carries.
var errKubernetesBehind = errors.New("kubeadm configured this node for an older Kubernetes than its slot carries")

// PhaseKubernetesUpgrade is the name of the kubernetes-upgrade phase.
const PhaseKubernetesUpgrade = "kubernetes-upgrade"

// upgradePhase is the kubernetes-upgrade phase, after "kubernetes".
func (f *Flow) upgradePhase() phase.Phase {
	return phase.Phase{
		Name: PhaseKubernetesUpgrade,
		Apply: func(ctx context.Context, c *machineconfig.Config) error {
			return applyKubernetesUpgrade(ctx, f, c)
		},
		Verify: func(ctx context.Context, c *machineconfig.Config) error {
			return verifyKubernetesUpgrade(ctx, f, c)
		},
	}
}

// ConfiguredKubernetes is the Kubernetes kubeadm configured the node for,
// as the journal records it (formation steps, Kubernetes upgrades). A
// control plane formed before it was recorded has it read from its
// kube-apiserver manifest; a worker's files name no version: "" (unknown),
// which the phase treats as behind (`kubeadm upgrade node` is safe to
// repeat on a worker). It only looks.
func (f *Flow) ConfiguredKubernetes(c *machineconfig.Config) (string, error) {
	var v string
	f.State.Read(func(j *nodestate.Journal) { v = j.Kubernetes })
	if v != "" || !c.Cluster.IsControlPlane() {
		return v, nil
	}
	b, err := os.ReadFile(f.Path(ManifestsDir + "/kube-apiserver.yaml"))
	if err != nil {
		return "", fmt.Errorf("the Kubernetes this control plane runs: %w", err)
	}
	m := apiserverImage.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s/kube-apiserver.yaml names no %s image", ManifestsDir, "registry.k8s.io/kube-apiserver")
	}
	return string(m[1]), nil
}

// manifestKubernetes is the Kubernetes its API server's static pod
// manifest names, "" when it names none or there is none.
func manifestKubernetes(h *host.Host) string {
	b, err := os.ReadFile(h.Path(ManifestsDir + "/kube-apiserver.yaml"))
	if err != nil {
		return ""
	}
	if m := apiserverImage.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// apiserverImage finds the tag of the kube-apiserver image in its static
// pod's manifest.
var apiserverImage = regexp.MustCompile(`(?m)^\s*image:\s*["']?registry\.k8s\.io/kube-apiserver:(v[0-9][^\s"']*)`)

// recordKubernetes records the Kubernetes kubeadm configured the node for.
func (f *Flow) recordKubernetes(v string) error {
	return f.State.Update(func(j *nodestate.Journal) { j.Kubernetes = v })
}

// kubernetesVersions are the Kubernetes the node is configured for (have)
// and the one its slot carries (want).
func kubernetesVersions(f *Flow, c *machineconfig.Config) (have, want string, err error) {
	if want, err = bundleKubernetesVersion(f.Host, f.KubernetesRoot()); err != nil {
		return "", "", err
	}
	have, err = f.ConfiguredKubernetes(c)
	return have, want, err
}

func verifyKubernetesUpgrade(ctx context.Context, f *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	have, want, err := kubernetesVersions(f, c)
	if err != nil {
		return err
	}
	if have != want {
		return fmt.Errorf("%w: %s, the slot %s", errKubernetesBehind, orUnknown(have), want)
	}
	if v := clusterRestorePending(f); v == want && c.Cluster.IsControlPlane() {
		return fmt.Errorf("%w (this slot's %s)", errClusterRestorePending, v)
	}
	if etcdRestorePending(f) && c.Cluster.IsControlPlane() {
		return errEtcdRestorePending
	}
	return nil
}

func orUnknown(v string) string {
	if v == "" {
		return "an unrecorded version"
	}
	return v
}

func applyKubernetesUpgrade(ctx context.Context, f *Flow, c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	have, want, err := kubernetesVersions(f, c)
	if err != nil {
		return err
	}
	if have == want {
		if !cl.IsControlPlane() {
			return nil
		}
		// etcd first: the cluster's objects are written into it.
		if etcdRestorePending(f) {
			if err := restoreEtcdAfterRollback(ctx, f, c); err != nil {
				return err
			}
		}
		if v := clusterRestorePending(f); v == want {
			return restoreCluster(ctx, f, c, v)
		}
		return nil
	}
	// The same rules the upgrade file was checked with before it was
	// written (upgrade.CheckKubernetes), for a slot that came otherwise.
	if err := upgrade.CheckKubernetes(upgrade.KubernetesSkew{Running: have}, want); err != nil {
		return err
	}
	detail := fmt.Sprintf("from %s to %s", orUnknown(have), want)
	if cl.IsControlPlane() && manifestKubernetes(f.Host) == want {
		detail += " (its control plane started on " + want + " before the kubelet: kubeadm restarts only what differs)"
	}
	f.Report.Report("kubernetes upgrade", step.Started, detail)
	// containerd unpacks the new images (kubeadm's pulls, kube-proxy's,
	// CoreDNS's): see pkg/node/images/unpackwindow.
	if err := unpackwindow.Open(f.Host); err != nil {
		return err
	}
	kept := have
	if kept == "" {
		kept = "unrecorded"
	}
	if err := keepBeforeUpgrade(ctx, f.Host, kept); err != nil {
		return err
	}
	run := func(ctx context.Context) error {
		args, err := upgradeCommand(ctx, f, c, want, kept)
		if err != nil {
			return err
		}
		f.Cluster(func(s *ClusterStatus) { s.Step = "kubeadm " + strings.Join(args[:2], " ") })
		err = f.Run(ctx, "kubeadm", args...)
		// kubeadm rewrote the kubelet's configuration 0644, and a
		// rollback of its own puts back etcd's data as root's: tightened
		// either way, before the kubelet restarts etcd as etcd.
		if terr := tightenKubeadmFiles(f); err == nil {
			err = terr
		}
		if err != nil {
			return err
		}
		if err := f.Sync(ctx); err != nil {
			return err
		}
		return f.Run(ctx, "systemctl", "restart", "kubelet.service")
	}
	if cl.IsControlPlane() {
		err = withJoinLock(ctx, f, c, "kubernetes upgrade", run)
	} else {
		err = run(ctx)
	}
	if err != nil {
		return fmt.Errorf("upgrade Kubernetes from %s to %s: %w", orUnknown(have), want, err)
	}
	if err := f.recordKubernetes(want); err != nil {
		return err
	}
	f.Report.Report("kubernetes upgrade", step.Done, fmt.Sprintf("from %s to %s", orUnknown(have), want))
	return nil
}

// UpgradeConfigFile is the UpgradeConfiguration kubeadm's upgrade reads.
const UpgradeConfigFile = "/etc/terrarium/kubeadm-upgrade.yaml"

// upgradeCommand writes the upgrade configuration and returns kubeadm's
// command for this node: `upgrade apply` on the first control plane (it
// takes an etcd snapshot first), `upgrade node` on the others and on
// workers.
func upgradeCommand(ctx context.Context, f *Flow, c *machineconfig.Config, want, kept string) ([]string, error) {
	in := kubeadmconfig.UpgradeInput{
		KubernetesVersion: want, ControlPlane: c.Cluster.IsControlPlane(), IgnorePreflightErrors: upgradeIgnoredChecks(c.Cluster),
	}
	writeConfig := func() error {
		cfg, err := kubeadmconfig.RenderUpgrade(in)
		if err != nil {
			return err
		}
		_, err = f.WriteIfChanged(UpgradeConfigFile, cfg, 0o600)
		return err
	}
	node := []string{"upgrade", "node", "--config=" + UpgradeConfigFile}
	if !c.Cluster.IsControlPlane() {
		return node, writeConfig()
	}
	cluster, err := clusterKubernetes(ctx, f)
	if err != nil {
		return nil, err
	}
	if cluster == want {
		return node, writeConfig()
	}
	// Within a minor version kubeadm's version policy holds by
	// construction; what else its preflight checks is checked here, and
	// kubeadm's own preflight runs when a check fails. It would otherwise
	// wait up to a minute on a Job that the drained node cannot run.
	if upgrade.IsPatchUpgrade(cluster, want) {
		err := applyPreflight(ctx, f, c.Cluster)
		in.SkipApplyPreflight = err == nil
		if err != nil {
			f.Report.Report("kubernetes upgrade", step.Checked, "kubeadm's preflight runs: "+err.Error())
		}
	}
	if err := writeConfig(); err != nil {
		return nil, err
	}
	_, keep := c.Cluster.BackupSchedule()
	snap, err := etcdbackup.Take(ctx, f.Host, keep)
	if err != nil {
		return nil, fmt.Errorf("the etcd snapshot before the upgrade: %w", err)
	}
	f.Report.Report("kubernetes upgrade", step.Snapshot, snap.Path)
	// A rollback restores etcd from it if the upgrade moves etcd's data
	// to a newer minor version.
	if _, err := f.WriteIfChanged(filepath.Join(layout.KubernetesBeforeUpgradeDir, kept, snapshotMarker), []byte(snap.Path+"\n"), 0o600); err != nil {
		return nil, err
	}
	// A rollback of this slot puts the cluster's kubeadm objects back
	// (RestoreBeforeUpgrade, then restoreCluster): marked in the copy
	// kept before the upgrade, before kubeadm changes them.
	if _, err := f.WriteIfChanged(filepath.Join(layout.KubernetesBeforeUpgradeDir, kept, appliedMarker), []byte(cluster+"\n"), 0o600); err != nil {
		return nil, err
	}
	return []string{"upgrade", "apply", "--config=" + UpgradeConfigFile, "--yes"}, nil
}

// applyPreflight checks what `kubeadm upgrade apply`'s preflight phase
// checks of a cluster's health, when a patch upgrade skips that phase:
// the control plane's static pod manifests in place (kubeadm's
// StaticPodManifest) and every control plane Ready (ControlPlaneNodesReady).
// Its CreateJob check we ignore in any case. The rest of the phase: its
// version policy holds within a minor; its CoreDNS migration check
// matters only when CoreDNS moves to another version, so the slot's
// CoreDNS must be the one running; and its pre-pull finds the slot's
// images, which the node's registry serves.
func applyPreflight(ctx context.Context, f *Flow, cl *machineconfig.Cluster) error {
	if err := staticPodsPresent(f, cl); err != nil {
		return err
	}
	api, err := f.API(AdminKubeconfig)
	if err != nil {
		return err
	}
	nodes, err := api.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("list the nodes: %w", err)
	}
	for _, n := range nodes {
		if n.ControlPlane && !n.Ready {
			return fmt.Errorf("control plane %s is not Ready", n.Name)
		}
	}
	want := bundleImage(f, coreDNSImage, "")
	if want == "" {
		return fmt.Errorf("the slot's bundle (%s) carries no %s image", bundleIndex, coreDNSImage)
	}
	have, err := f.Output(ctx, "kubectl", "--kubeconfig="+f.Path(AdminKubeconfig), "get", "deployment", "coredns",
		"--namespace=kube-system", "--output=jsonpath={.spec.template.spec.containers[0].image}")
	if err != nil {
		return fmt.Errorf("the cluster's CoreDNS: %w", err)
	}
	if have = strings.TrimSpace(have); have != want {
		return fmt.Errorf("CoreDNS moves from %s to %s", have, want)
	}
	return nil
}

// coreDNSImage is CoreDNS's image, as kubeadm names it, without its tag.
const coreDNSImage = "registry.k8s.io/coredns/coredns"

// clusterKubernetesVersion finds the version in kubeadm's
// ClusterConfiguration.
var clusterKubernetesVersion = regexp.MustCompile(`(?m)^kubernetesVersion:\s*["']?(v[0-9][^\s"']*)`)

// clusterKubernetes is the Kubernetes of the cluster's kubeadm
// ClusterConfiguration (the kubeadm-config ConfigMap), which `kubeadm
// upgrade apply` moves to the new version.
func clusterKubernetes(ctx context.Context, f *Flow) (string, error) {
	out, err := f.Output(ctx, "kubectl", "--kubeconfig="+f.Path(AdminKubeconfig), "get", "configmap", "kubeadm-config",
		"--namespace=kube-system", "--output=jsonpath={.data.ClusterConfiguration}")
	if err != nil {
		return "", fmt.Errorf("the cluster's kubeadm configuration: %w", err)
	}
	m := clusterKubernetesVersion.FindStringSubmatch(out)
	if m == nil {
		return "", errors.New("the cluster's kubeadm configuration names no kubernetesVersion")
	}
	return m[1], nil
}

// appliedMarker, in a version's kept copy, says this node ran `kubeadm
// upgrade apply` from that version: the cluster-wide objects moved too.
// snapshotMarker names the etcd snapshot taken before it.
const (
	appliedMarker  = "upgrade-apply"
	snapshotMarker = "etcd-snapshot"
)

// keepBeforeUpgrade copies the static pod manifests and the kubelet's
// configuration into layout.KubernetesBeforeUpgradeDir/<version>, once:
// a rerun after a power cut keeps the first copy, taken before anything
// changed.
func keepBeforeUpgrade(ctx context.Context, h *host.Host, version string) error {
	dst := h.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, version))
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	tmp := dst + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	files := []string{KubeletConfigFile, KubeletFlagsFile, kubeletInstanceFile}
	if ms, err := filepath.Glob(h.Path(ManifestsDir + "/*.yaml")); err == nil {
		for _, m := range ms {
			files = append(files, ManifestsDir+"/"+filepath.Base(m))
		}
	}
	for _, name := range files {
		b, err := os.ReadFile(h.Path(name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		fi, err := os.Stat(h.Path(name))
		if err != nil {
			return err
		}
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, fi.Mode().Perm()); err != nil { // its mode, to restore it with
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if err := h.Sync(ctx); err != nil { // the copies before their name
		return err
	}
	return os.Rename(tmp, dst)
}

// RestoreBeforeUpgrade undoes, on the old slot after a rollback, what a
// Kubernetes upgrade on the new slot changed: the static pod manifests and
// the kubelet's configuration kept for the slot's Kubernetes are put back
// where they differ (a manifest the upgrade added is removed), the kubelet
// restarts, and the slot's Kubernetes is recorded again. It returns what
// it restored (nothing when no copy was kept for this slot's version).
// The kept copy is removed once restored.
func (f *Flow) RestoreBeforeUpgrade(ctx context.Context) ([]string, error) {
	v, err := bundleKubernetesVersion(f.Host, f.KubernetesRoot())
	if err != nil {
		return nil, nil // a slot without Kubernetes
	}
	kept := f.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, v))
	if _, err := os.Stat(kept); err != nil {
		return nil, nil
	}
	var restored []string
	want := map[string]bool{}
	err = filepath.WalkDir(kept, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(kept, p)
		if err != nil {
			return err
		}
		if rel == appliedMarker || rel == snapshotMarker {
			return nil
		}
		name := "/" + filepath.ToSlash(rel)
		want[name] = true
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if name == ManifestsDir+"/etcd.yaml" && etcdMinorChanged(b, f.Path(name)) {
			// etcd's data was upgraded to a newer minor, which the older
			// etcd refuses: the newer etcd runs on until the
			// kubernetes-upgrade phase restores etcd from its pre-upgrade
			// snapshot (restoreEtcdAfterRollback) with this manifest.
			if err := f.pendEtcdRestore(b, filepath.Join(kept, snapshotMarker)); err != nil {
				return err
			}
			restored = append(restored, name+" (etcd's data moved to a newer minor version: restored from its pre-upgrade snapshot once the node's phases run)")
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		changed, err := f.WriteIfChanged(name, b, info.Mode().Perm())
		if changed {
			restored = append(restored, name)
		}
		return err
	})
	if err != nil {
		return restored, fmt.Errorf("restore the Kubernetes %s files kept before the upgrade: %w", v, err)
	}
	// A static pod the upgrade added would run on; a copy that kept no
	// manifest at all (a worker's) removes none.
	keptManifests := false
	for name := range want {
		keptManifests = keptManifests || strings.HasPrefix(name, ManifestsDir+"/")
	}
	if ms, err := filepath.Glob(f.Path(ManifestsDir + "/*.yaml")); err == nil && keptManifests {
		for _, m := range ms {
			name := ManifestsDir + "/" + filepath.Base(m)
			if !want[name] {
				if err := os.Remove(m); err != nil {
					return restored, err
				}
				restored = append(restored, name+" (removed)")
			}
		}
	}
	if len(restored) > 0 {
		if err := f.Sync(ctx); err != nil {
			return restored, err
		}
		if err := f.Run(ctx, "systemctl", "restart", "kubelet.service"); err != nil {
			return restored, err
		}
	}
	if err := f.recordKubernetes(v); err != nil {
		return restored, err
	}
	if _, err := os.Stat(filepath.Join(kept, appliedMarker)); err == nil {
		// The cluster's objects wait for the API (restoreCluster, in the
		// kubernetes-upgrade phase).
		if _, err := f.WriteIfChanged(layout.KubernetesClusterRestoreFile, []byte(v+"\n"), 0o600); err != nil {
			return restored, err
		}
		restored = append(restored, "the cluster's kubeadm objects (once the API is up)")
	}
	return restored, os.RemoveAll(kept)
}

// pendEtcdRestore keeps the etcd manifest from before the upgrade and the
// path of its pre-upgrade snapshot (in the file named snapshotFile) for
// restoreEtcdAfterRollback.
func (f *Flow) pendEtcdRestore(manifest []byte, snapshotFile string) error {
	snap, err := os.ReadFile(snapshotFile)
	if err != nil {
		snap = nil // no snapshot recorded: restoreEtcdAfterRollback says so
	}
	dir := f.Path(layout.EtcdRestoreDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd.yaml"), manifest, 0o600); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, snapshotMarker), snap, 0o600)
}

// errEtcdRestorePending: etcd runs at the newer minor version of an
// upgrade that rolled back.
var errEtcdRestorePending = errors.New("etcd runs at the newer minor version of an upgrade that rolled back")

// etcdRestorePending reports whether restoreEtcdAfterRollback has work.
func etcdRestorePending(f *Flow) bool {
	_, err := os.Stat(f.Path(filepath.Join(layout.EtcdRestoreDir, "etcd.yaml")))
	return err == nil
}

// etcdStopWait bounds the wait for the kubelet to stop etcd's static pod.
const etcdStopWait = 3 * time.Minute

// restoreEtcdAfterRollback brings a control plane back to the etcd it ran before an
// upgrade that moved etcd's data to a newer minor version and rolled back.
// With one control plane, etcd is the node's alone: its static pod is
// stopped, its data restored from the snapshot taken before the upgrade
// (etcdbackup.RestoreSnapshot: what was written since is lost, the data
// replaced is kept beside) and its manifest from before put back. With
// several, each member holds the cluster's data and no one node can go
// back alone: etcd stays at the newer version, and the console says so
// and where the snapshot is.
func restoreEtcdAfterRollback(ctx context.Context, f *Flow, c *machineconfig.Config) error {
	dir := f.Path(layout.EtcdRestoreDir)
	snapPath, _ := os.ReadFile(filepath.Join(dir, snapshotMarker))
	snap := strings.TrimSpace(string(snapPath))
	if len(c.Cluster.ControlPlanes) > 1 || snap == "" {
		why := "the cluster has several control planes, each holding etcd's data"
		if snap == "" {
			why = "no snapshot was recorded before the upgrade"
		}
		f.Report.Report("kubernetes upgrade", step.EtcdKept, fmt.Sprintf("etcd stays at the newer minor version (%s); the snapshot before the upgrade is in %s for a restore by hand (docs/operations/backup.md)",
			why, layout.EtcdSnapshotDir))
		return os.RemoveAll(dir)
	}
	old, err := os.ReadFile(filepath.Join(dir, "etcd.yaml"))
	if err != nil {
		return err
	}
	f.Report.Report("kubernetes upgrade", step.RestoringEtcd, "from "+snap)
	// The kubelet stops a static pod whose manifest goes.
	if err := os.Rename(f.Path(layout.EtcdManifest), filepath.Join(dir, "etcd.newer.yaml")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	deadline := f.Now().Add(etcdStopWait)
	for {
		running, err := f.Runtime.Running(ctx, kubeadmconfig.CRISocket, "etcd")
		if err == nil && !running {
			break
		}
		if !f.Now().Before(deadline) {
			if err != nil {
				return fmt.Errorf("etcd did not stop within %s after its manifest was removed: %w", etcdStopWait, err)
			}
			return fmt.Errorf("etcd did not stop within %s after its manifest was removed: it still runs", etcdStopWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(f.Timing.FilePoll):
		}
	}
	if err := etcdbackup.RestoreSnapshot(ctx, f.Host, c, snap); err != nil {
		return err
	}
	if _, err := f.WriteIfChanged(layout.EtcdManifest, old, 0o600); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	f.Report.Report("kubernetes upgrade", step.RestoredEtcd, fmt.Sprintf("from %s, with the etcd of before the upgrade (what the cluster wrote since is lost; the newer data is in %s.replaced)",
		snap, layout.EtcdDataDir))
	return nil
}

// ClusterRestoreConfigFile is the kubeadm configuration restoreCluster
// puts the cluster's objects back with.
const ClusterRestoreConfigFile = "/etc/terrarium/kubeadm-restore.yaml"

// errClusterRestorePending: a rolled-back `kubeadm upgrade apply` left the
// cluster's kubeadm objects at the newer version.
var errClusterRestorePending = errors.New("the cluster's kubeadm objects still name the version of an upgrade that rolled back")

// clusterRestorePending is the version whose cluster-wide objects this
// node is to put back, "" when none.
func clusterRestorePending(f *Flow) string {
	b, err := os.ReadFile(f.Path(layout.KubernetesClusterRestoreFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// restoreCluster puts back what `kubeadm upgrade apply` changed across the
// cluster, on the control plane that ran it, once its slot rolled back:
// the ClusterConfiguration and the kubelet's configuration in the cluster
// (kubeadm init phase upload-config) and the CoreDNS and kube-proxy
// add-ons with their images (kubeadm init phase addon), from this slot's
// kubeadm and version. Without it kube-proxy's DaemonSet would go on
// naming an image no node's bundle holds any more.
func restoreCluster(ctx context.Context, f *Flow, c *machineconfig.Config, v string) error {
	if err := waitForLocalAPI(ctx, f, c); err != nil {
		return err
	}
	// An init node's configuration, whatever this control plane's role:
	// the phases read only the cluster-wide parts.
	cl := *c.Cluster
	cl.Role = machineconfig.RoleInit
	cfg, err := kubeadmconfig.Render(kubeadmconfig.Input{Cluster: &cl, NodeName: c.Hostname, KubernetesVersion: v, PodResolvConf: PodResolvConf, Now: f.Now()})
	if err != nil {
		return err
	}
	if _, err := f.WriteIfChanged(ClusterRestoreConfigFile, cfg, 0o600); err != nil {
		return err
	}
	f.Report.Report("kubernetes upgrade", step.Restoring, "the cluster's kubeadm objects to "+v)
	for _, args := range [][]string{
		{"init", "phase", "upload-config", "all", "--config=" + ClusterRestoreConfigFile},
		{"init", "phase", "addon", "all", "--config=" + ClusterRestoreConfigFile},
	} {
		if err := f.Run(ctx, "kubeadm", args...); err != nil {
			return fmt.Errorf("put the cluster's kubeadm objects back to %s: %w", v, err)
		}
	}
	if err := os.Remove(f.Path(layout.KubernetesClusterRestoreFile)); err != nil {
		return err
	}
	f.Report.Report("kubernetes upgrade", step.Restored, "the cluster's kubeadm objects to "+v)
	return nil
}

// ForgetBeforeUpgrade removes the copies kept before Kubernetes upgrades:
// an upgrade committed on its new slot has no use for them.
func (f *Flow) ForgetBeforeUpgrade() error {
	return os.RemoveAll(f.Path(layout.KubernetesBeforeUpgradeDir))
}

// etcdImage finds the etcd image's major and minor version in its static
// pod's manifest.
var etcdImage = regexp.MustCompile(`registry\.k8s\.io/etcd:v?(\d+)\.(\d+)\.`)

// etcdMinorChanged reports whether the etcd manifest at path runs another
// etcd minor version than the kept manifest kept names.
func etcdMinorChanged(kept []byte, path string) bool {
	cur, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	a, b := etcdImage.FindSubmatch(kept), etcdImage.FindSubmatch(cur)
	return a != nil && b != nil && (string(a[1]) != string(b[1]) || string(a[2]) != string(b[2]))
}
