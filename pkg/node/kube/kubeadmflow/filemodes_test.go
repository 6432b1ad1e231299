package kubeadmflow

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// The etcd account of the tests: the image's ID (os/overlay's
// sysusers.d), which the tests, run as root like ignition's, may chown to.
const etcdUID, etcdGID = 232, 232

const passwdWithEtcd = "root:x:0:0:root:/root:/bin/bash\netcd:x:232:232:etcd:/var/lib/etcd:/usr/sbin/nologin\n"

// write writes content to p under the flow's root with mode, whatever
// the umask.
func write(t *testing.T, f *Flow, p string, mode os.FileMode, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(f.Path(p)), 0o755))
	require.NoError(t, os.WriteFile(f.Path(p), []byte(content), mode))
	require.NoError(t, os.Chmod(f.Path(p), mode))
}

// ownerOf is the owner of p under the flow's root.
func ownerOf(t *testing.T, f *Flow, p string) (uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(f.Path(p))
	require.NoError(t, err)
	uid, gid, ok := owner(fi)
	require.True(t, ok)
	return uid, gid
}

// kubeadmTree is a control plane's files as kubeadm leaves them: its
// certificates and the kubelet's configuration 0644, its keys,
// kubeconfigs and manifests 0600, everything root's.
func kubeadmTree(t *testing.T, f *Flow) {
	t.Helper()
	for p, mode := range map[string]os.FileMode{
		"/etc/kubernetes/admin.conf": 0o600, "/etc/kubernetes/super-admin.conf": 0o600,
		"/etc/kubernetes/controller-manager.conf": 0o600, "/etc/kubernetes/scheduler.conf": 0o644,
		"/etc/kubernetes/kubelet.conf": 0o600,
		ManifestsDir + "/etcd.yaml":    0o600, ManifestsDir + "/kube-apiserver.yaml": 0o644,
		KubernetesPKIDir + "/ca.crt": 0o600, KubernetesPKIDir + "/ca.key": 0o600,
		KubernetesPKIDir + "/apiserver.crt": 0o644, KubernetesPKIDir + "/apiserver.key": 0o600,
		KubernetesPKIDir + "/front-proxy-client.crt": 0o644, KubernetesPKIDir + "/sa.pub": 0o644,
		KubernetesPKIDir + "/etcd/ca.crt": 0o600, KubernetesPKIDir + "/etcd/ca.key": 0o600,
		KubernetesPKIDir + "/etcd/server.crt": 0o644, KubernetesPKIDir + "/etcd/server.key": 0o600,
		KubernetesPKIDir + "/etcd/peer.crt": 0o644, KubernetesPKIDir + "/etcd/peer.key": 0o600,
		KubernetesPKIDir + "/etcd/healthcheck-client.crt": 0o644, KubernetesPKIDir + "/etcd/healthcheck-client.key": 0o600,
		KubeletConfigFile: 0o644, KubeletFlagsFile: 0o644,
		CNIConflist: 0o644,
	} {
		write(t, f, p, mode, p+"\n")
	}
	// etcd's static pod as kubeadm writes it with Terrarium's patches.
	write(t, f, layout.EtcdManifest, 0o600, "volumes:\n- hostPath: {path: "+layout.EtcdOwnPKIDir+", type: Directory}\n  name: etcd-certs\n")
	require.NoError(t, os.Chmod(f.Path(KubernetesPKIDir), 0o755))
	require.NoError(t, os.Chmod(f.Path(KubernetesPKIDir+"/etcd"), 0o700))
	write(t, f, "/etc/passwd", 0o644, passwdWithEtcd)
}

// TestTightenKubeadmFiles: after a kubeadm step every file of kubeadm's
// is root's alone (0600, directories 0700); etcd's own certificates and
// keys are copied to a directory of etcd's, etcd's alone; etcd's data
// directory is made etcd's, with everything in it; check agrees, and
// says what a loosened file or a stale copy is.
func TestTightenKubeadmFiles(t *testing.T) {
	f := testFlow(t, nil)
	kubeadmTree(t, f)
	// A restore's data, root's (etcdutl ran as root).
	write(t, f, layout.EtcdDataDir+"/member/snap/db", 0o600, "db")
	require.Error(t, checkKubeadmFiles(f))
	require.NoError(t, tightenKubeadmFiles(f))

	type want struct {
		mode     os.FileMode
		uid, gid int
	}
	for p, w := range map[string]want{
		"/etc/kubernetes/scheduler.conf":                  {0o600, 0, 0},
		"/etc/kubernetes/admin.conf":                      {0o600, 0, 0},
		ManifestsDir + "/kube-apiserver.yaml":             {0o600, 0, 0},
		KubernetesPKIDir:                                  {0o700, 0, 0},
		KubernetesPKIDir + "/apiserver.crt":               {0o600, 0, 0},
		KubernetesPKIDir + "/front-proxy-client.crt":      {0o600, 0, 0},
		KubernetesPKIDir + "/sa.pub":                      {0o600, 0, 0},
		KubernetesPKIDir + "/etcd":                        {0o700, 0, 0},
		KubernetesPKIDir + "/etcd/ca.crt":                 {0o600, 0, 0},
		KubernetesPKIDir + "/etcd/server.crt":             {0o600, 0, 0},
		KubernetesPKIDir + "/etcd/server.key":             {0o600, 0, 0},
		KubernetesPKIDir + "/etcd/peer.crt":               {0o600, 0, 0},
		KubernetesPKIDir + "/etcd/peer.key":               {0o600, 0, 0},
		layout.EtcdOwnPKIDir:                              {0o700, etcdUID, etcdGID},
		layout.EtcdOwnPKIDir + "/ca.crt":                  {0o600, etcdUID, etcdGID},
		layout.EtcdOwnPKIDir + "/server.crt":              {0o600, etcdUID, etcdGID},
		layout.EtcdOwnPKIDir + "/server.key":              {0o600, etcdUID, etcdGID},
		layout.EtcdOwnPKIDir + "/peer.crt":                {0o600, etcdUID, etcdGID},
		layout.EtcdOwnPKIDir + "/peer.key":                {0o600, etcdUID, etcdGID},
		CNIConflist:                                       {0o600, 0, 0},
		KubernetesPKIDir + "/etcd/ca.key":                 {0o600, 0, 0},
		KubernetesPKIDir + "/etcd/healthcheck-client.crt": {0o600, 0, 0},
		KubeletConfigFile:                                 {0o600, 0, 0},
		KubeletFlagsFile:                                  {0o600, 0, 0},
		layout.EtcdDataDir:                                {0o700, etcdUID, etcdGID},
		layout.EtcdDataDir + "/member/snap/db":            {0o600, etcdUID, etcdGID},
	} {
		fi, err := os.Stat(f.Path(p))
		require.NoError(t, err, p)
		uid, gid := ownerOf(t, f, p)
		assert.Equal(t, w, want{fi.Mode().Perm(), uid, gid}, p)
	}
	uid, _ := ownerOf(t, f, layout.EtcdDataDir+"/member")
	assert.Equal(t, etcdUID, uid, "every directory in etcd's data is etcd's")
	require.NoError(t, checkKubeadmFiles(f))

	require.NoError(t, os.Chmod(f.Path(KubeletConfigFile), 0o644))
	assert.ErrorContains(t, checkKubeadmFiles(f), KubeletConfigFile+" has mode -rw-r--r--, want -rw-------")
	require.NoError(t, tightenKubeadmFiles(f))
	for _, name := range etcdOwnFiles {
		b, err := os.ReadFile(f.Path(layout.EtcdOwnPKIDir + "/" + name))
		require.NoError(t, err)
		assert.Equal(t, KubernetesPKIDir+"/etcd/"+name+"\n", string(b), "etcd's copy of %s", name)
	}
	assert.NoFileExists(t, f.Path(layout.EtcdOwnPKIDir+"/ca.key"), "etcd's CA key stays root's alone")
	assert.NoFileExists(t, f.Path(layout.EtcdOwnPKIDir+"/healthcheck-client.key"))
	require.NoError(t, os.Chown(f.Path(layout.EtcdOwnPKIDir+"/server.key"), 0, 0))
	assert.ErrorContains(t, checkKubeadmFiles(f), layout.EtcdOwnPKIDir+"/server.key is owned by 0:0, want 232:232")
	require.NoError(t, tightenKubeadmFiles(f))
	// kubeadm renews a certificate (an upgrade): the copy is stale until
	// the next pass.
	write(t, f, KubernetesPKIDir+"/etcd/server.crt", 0o644, "renewed\n")
	assert.ErrorContains(t, checkKubeadmFiles(f), layout.EtcdOwnPKIDir+"/server.crt differs from kubeadm's "+KubernetesPKIDir+"/etcd/server.crt")
	require.NoError(t, tightenKubeadmFiles(f))
	b, err := os.ReadFile(f.Path(layout.EtcdOwnPKIDir + "/server.crt"))
	require.NoError(t, err)
	assert.Equal(t, "renewed\n", string(b))
	uid, _ = ownerOf(t, f, layout.EtcdOwnPKIDir+"/server.crt")
	assert.Equal(t, etcdUID, uid, "a renewed copy is etcd's too")
	require.NoError(t, os.Chown(f.Path(layout.EtcdDataDir+"/member/snap/db"), 0, 0))
	assert.ErrorContains(t, checkKubeadmFiles(f), layout.EtcdDataDir+"/member/snap/db is owned by 0:0")
	require.NoError(t, tightenKubeadmFiles(f))
	require.NoError(t, checkKubeadmFiles(f))

	require.NoError(t, os.RemoveAll(f.Path(layout.EtcdDataDir)))
	assert.ErrorContains(t, checkKubeadmFiles(f), layout.EtcdDataDir, "etcd's certificates without its data directory")
}

// TestLegacyEtcdPKI: a node whose etcd pod an earlier release wrote (it
// mounts kubeadm's PKI directory) keeps etcd's files there etcd's, in a
// directory etcd may only pass through, until an upgrade writes the pod
// again; the copies are made all the same.
func TestLegacyEtcdPKI(t *testing.T) {
	f := testFlow(t, nil)
	kubeadmTree(t, f)
	write(t, f, layout.EtcdManifest, 0o600, "volumes:\n- hostPath: {path: /etc/kubernetes/pki/etcd, type: DirectoryOrCreate}\n  name: etcd-certs\n")
	require.NoError(t, tightenKubeadmFiles(f))
	for p, w := range map[string][3]int{
		KubernetesPKIDir + "/etcd":            {0o710, 0, etcdGID},
		KubernetesPKIDir + "/etcd/server.key": {0o600, etcdUID, etcdGID},
		KubernetesPKIDir + "/etcd/ca.crt":     {0o600, etcdUID, etcdGID},
		KubernetesPKIDir + "/etcd/ca.key":     {0o600, 0, 0},
		layout.EtcdOwnPKIDir + "/server.key":  {0o600, etcdUID, etcdGID},
	} {
		fi, err := os.Stat(f.Path(p))
		require.NoError(t, err, p)
		uid, gid := ownerOf(t, f, p)
		assert.Equal(t, w, [3]int{int(fi.Mode().Perm()), uid, gid}, p)
	}
	require.NoError(t, checkKubeadmFiles(f))

	// The upgrade's new pod mounts etcd's own directory: the next pass
	// gives kubeadm's files back to root.
	write(t, f, layout.EtcdManifest, 0o600, "path: "+layout.EtcdOwnPKIDir+"\n")
	assert.ErrorContains(t, checkKubeadmFiles(f), KubernetesPKIDir+"/etcd has mode -rwx--x---, want -rwx------")
	require.NoError(t, tightenKubeadmFiles(f))
	uid, _ := ownerOf(t, f, KubernetesPKIDir+"/etcd/server.key")
	assert.Equal(t, 0, uid)
}

// etcd's data directory is made, etcd's, as soon as etcd's certificates
// exist: before kubeadm's etcd phase (which would make it root's), and
// never before them (kubeadm's preflight wants none on an init node).
func TestTightenMakesEtcdsDataDirectory(t *testing.T) {
	f := testFlow(t, nil)
	write(t, f, "/etc/passwd", 0o644, passwdWithEtcd)
	write(t, f, KubernetesPKIDir+"/ca.crt", 0o600, "ca")
	require.NoError(t, tightenKubeadmFiles(f))
	assert.NoDirExists(t, f.Path(layout.EtcdDataDir), "no etcd certificates yet")

	write(t, f, KubernetesPKIDir+"/etcd/server.crt", 0o644, "server")
	require.NoError(t, tightenKubeadmFiles(f))
	fi, err := os.Stat(f.Path(layout.EtcdDataDir))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	uid, gid := ownerOf(t, f, layout.EtcdDataDir)
	assert.Equal(t, []int{etcdUID, etcdGID}, []int{uid, gid})
}

// A worker has no etcd: its files are tightened without an etcd account.
func TestTightenWorker(t *testing.T) {
	f := testFlow(t, nil)
	write(t, f, "/etc/kubernetes/kubelet.conf", 0o600, "kubeconfig")
	write(t, f, KubernetesPKIDir+"/ca.crt", 0o644, "ca")
	write(t, f, KubeletConfigFile, 0o644, "kind: KubeletConfiguration\n")
	require.NoError(t, tightenKubeadmFiles(f), "no /etc/passwd, no etcd account: none needed")
	for _, p := range []string{KubernetesPKIDir + "/ca.crt", KubeletConfigFile} {
		fi, err := os.Stat(f.Path(p))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}
	assert.NoDirExists(t, f.Path(layout.EtcdDataDir))
	require.NoError(t, checkKubeadmFiles(f))
}

// A control plane without an etcd account cannot give etcd its files.
func TestTightenWithoutEtcdAccount(t *testing.T) {
	f := testFlow(t, nil)
	kubeadmTree(t, f)
	write(t, f, "/etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/bash\n")
	err := tightenKubeadmFiles(f)
	require.ErrorIs(t, err, host.ErrNoUser)
	assert.ErrorContains(t, err, "etcd's account")
}

// sysusersFlow is a flow whose systemd-sysusers adds passwd's line (none
// when empty) to /etc/passwd, and which records its commands.
func sysusersFlow(t *testing.T, line string) (*Flow, *[]string) {
	f := testFlow(t, nil)
	var mu sync.Mutex
	var cmds []string
	f.Host = &host.Host{Root: f.Root, Clock: f.Clock, Executor: host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		cmds = append(cmds, strings.TrimSpace(name+" "+strings.Join(args, " ")))
		if name == "systemd-sysusers" && line != "" {
			pf, err := os.OpenFile(f.Path("/etc/passwd"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return nil, err
			}
			defer pf.Close()
			_, err = pf.WriteString(line)
			return nil, err
		}
		return nil, nil
	})}
	write(t, f, "/etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/bash\n")
	return f, &cmds
}

// An /etc/passwd without etcd (a node's copy from before the image had
// it) gets it from the image's declaration; one with it is left alone.
func TestEnsureEtcdUser(t *testing.T) {
	ctx := context.Background()
	f, cmds := sysusersFlow(t, "etcd:x:232:232:etcd:/var/lib/etcd:/usr/sbin/nologin\n")
	u, err := ensureEtcdUser(ctx, f)
	require.NoError(t, err)
	assert.Equal(t, etcdUID, u.UID)
	assert.Equal(t, etcdGID, u.GID)
	assert.Equal(t, []string{"systemd-sysusers " + layout.SysusersFile}, *cmds)
	_, err = ensureEtcdUser(ctx, f)
	require.NoError(t, err)
	assert.Len(t, *cmds, 1, "made once")

	f, _ = sysusersFlow(t, "")
	_, err = ensureEtcdUser(ctx, f)
	require.ErrorIs(t, err, host.ErrNoUser)
	assert.ErrorContains(t, err, "does the image declare it?")

	f, _ = sysusersFlow(t, "")
	write(t, f, "/etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/bash\netcd:x:0:0::/:/bin/sh\n")
	_, err = ensureEtcdUser(ctx, f)
	assert.ErrorContains(t, err, "gives etcd the ID of root", "etcd never runs as root by mistake")
}

// The image declares the account etcd runs as, with its fixed ID.
func TestImageDeclaresEtcdUser(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("../../../../os/overlay", layout.SysusersFile))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^u `+layout.EtcdUser+` 232 `, string(b))
}

// A kubeadm step's files are tightened before the step is recorded done;
// a step whose files cannot be is not recorded.
func TestStepTightensBeforeRecording(t *testing.T) {
	ctx := context.Background()
	f := testFlow(t, nil)
	f.Host = &host.Host{Root: f.Root, Clock: f.Clock, Executor: host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "kubeadm" {
			// kubeadm's certs and kubelet-start phases.
			for p, mode := range map[string]os.FileMode{KubernetesPKIDir + "/etcd/server.crt": 0o644, KubeletConfigFile: 0o644} {
				if err := os.MkdirAll(filepath.Dir(f.Path(p)), 0o755); err != nil {
					return nil, err
				}
				if err := os.WriteFile(f.Path(p), []byte("x"), mode); err != nil {
					return nil, err
				}
			}
		}
		return nil, nil
	})}
	c := &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleInit}}
	prog := &nodestate.KubeadmProgress{Node: "n"}
	st := kubeadmStep{name: "init phase certs all", args: []string{"init", "phase", "certs", "all"}}

	err := doStep(ctx, f, c, prog, st)
	require.ErrorContains(t, err, "init phase certs all: etcd's account")
	assert.False(t, prog.IsDone(st.name), "not recorded: its files are not as they must be")

	write(t, f, "/etc/passwd", 0o644, passwdWithEtcd)
	require.NoError(t, doStep(ctx, f, c, prog, st))
	assert.True(t, prog.IsDone(st.name))
	require.NoError(t, checkKubeadmFiles(f))
	uid, _ := ownerOf(t, f, layout.EtcdDataDir)
	assert.Equal(t, etcdUID, uid, "etcd's data directory, etcd's, before kubeadm's etcd phase")
}

// Phase kubernetes-files heals a node formed by an earlier release: its
// control plane gets the etcd account, then every file its mode and owner.
func TestFilesPhase(t *testing.T) {
	ctx := context.Background()
	f, cmds := sysusersFlow(t, "etcd:x:232:232:etcd:/var/lib/etcd:/usr/sbin/nologin\n")
	kubeadmTree(t, f)
	write(t, f, "/etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/bash\n")
	c := &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleControlPlane}}
	p := f.filesPhase()
	assert.Equal(t, PhaseKubernetesFiles, p.Name)
	require.Error(t, p.Verify(ctx, c))
	require.NoError(t, p.Apply(ctx, c))
	assert.Equal(t, []string{"systemd-sysusers " + layout.SysusersFile}, *cmds)
	require.NoError(t, p.Verify(ctx, c))
	require.NoError(t, p.Verify(ctx, &machineconfig.Config{}), "a node without a cluster has nothing to check")

	var names []string
	for _, ph := range f.Phases() {
		names = append(names, ph.Name)
	}
	assert.Equal(t, []string{"kubernetes-host", "kubernetes-pki", "kubernetes-config", PhaseLocalVolumes, PhaseKubernetes, PhaseKubernetesReady, PhaseKubernetesFiles, "kubernetes-upgrade", PhaseClusterAddons}, names,
		"the files after kubeadm's steps, before an upgrade restarts etcd as etcd; the volume area before the kubelet; the add-ons after an upgrade of Kubernetes")
}

// A Kubernetes upgrade's kubeadm rewrites the kubelet's configuration
// 0644: tightened before the kubelet restarts, whether kubeadm succeeded
// or not.
func TestKubernetesUpgradeTightens(t *testing.T) {
	for _, fails := range []bool{false, true} {
		f, _ := upgradeFlow(t, "v1.36.4", "v1.36.3", "v1.36.4")
		exec := f.Executor
		f.Host = &host.Host{Root: f.Root, Clock: f.Clock, Executor: host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
			if name == "kubeadm" {
				if err := os.Chmod(f.Path(KubeletConfigFile), 0o644); err != nil {
					return nil, err
				}
				if fails {
					return []byte("etcd did not come back"), errors.New("exit status 1")
				}
			}
			return exec.Exec(ctx, name, args...)
		})}
		err := applyKubernetesUpgrade(context.Background(), f, clusterNode(machineconfig.RoleWorker))
		if fails {
			require.ErrorContains(t, err, "etcd did not come back")
		} else {
			require.NoError(t, err)
		}
		fi, err := os.Stat(f.Path(KubeletConfigFile))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "kubeadm failed: %v", fails)
	}
}

// A control plane's kubeadm patches run etcd as the node's etcd account;
// verify wants them so, and heals them when the account's IDs change.
func TestPatchesRunEtcdAsEtcd(t *testing.T) {
	ctx := context.Background()
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}}]}`)
	write(t, f, "/etc/passwd", 0o644, passwdWithEtcd)
	c := &machineconfig.Config{Hostname: "cp-2", Cluster: &machineconfig.Cluster{Name: "lab", Role: machineconfig.RoleControlPlane,
		NodeIP: "10.77.0.11", ControlPlanes: []string{"10.77.0.10", "10.77.0.11"}, CACertHash: "sha256:00", Token: "abcdef.0123456789abcdef"}}
	require.NoError(t, applyKubeadmConfig(ctx, f, c))
	b, err := os.ReadFile(f.Path(filepath.Join("/etc/terrarium/kubeadm-patches", "etcd+strategic.yaml")))
	require.NoError(t, err)
	assert.Contains(t, string(b), "runAsUser: 232\n        runAsGroup: 232\n")
	require.NoError(t, verifyKubeadmConfig(ctx, f, c))

	write(t, f, "/etc/passwd", 0o644, strings.Replace(passwdWithEtcd, "232:232", "240:240", 1))
	assert.ErrorContains(t, verifyKubeadmConfig(ctx, f, c), "etcd+strategic.yaml is missing or differs")
	require.NoError(t, applyKubeadmConfig(ctx, f, c))
	require.NoError(t, verifyKubeadmConfig(ctx, f, c))
}
