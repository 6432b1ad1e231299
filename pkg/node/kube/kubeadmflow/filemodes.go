package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
)

// The modes and owners of kubeadm's files (the CIS benchmark's 1.1 and
// 4.1 file checks; docs/security.md). kubeadm writes its certificates
// 0644 (and its keys, kubeconfigs and manifests 0600) and the kubelet's
// configuration 0644, and runs etcd as root; here every one of them is
// root's alone, and etcd, which runs as etcd (kubeadmconfig.Patches),
// reads copies of its own certificates and keys in a directory of its
// own (layout.EtcdOwnPKIDir), and writes a data directory of its own.
// Each kubeadm step is followed by tightenKubeadmFiles (before the step is
// recorded done, so that a power cut between the two runs both again), and
// so is each Kubernetes upgrade; phase kubernetes-files checks them on
// every boot and heals a node formed by an earlier release.

// PhaseKubernetesFiles is the phase that keeps kubeadm's files as
// kubeadmFiles says, after the kubeadm steps and before a Kubernetes
// upgrade (which restarts etcd as etcd).
const PhaseKubernetesFiles = "kubernetes-files"

// Modes of kubeadm's files and directories.
const (
	// etcdPKIDirMode lets etcd, the directory's group, reach its own
	// files by name in its PKI directory, and nothing more: it cannot
	// list, add or replace a file. Only on a node whose etcd still
	// mounts that directory (legacyEtcdPKI).
	etcdPKIDirMode os.FileMode = 0o710
	ownerOnlyDir   os.FileMode = 0o700
)

// etcdOwnFiles are the files of KubernetesPKIDir/etcd that etcd reads:
// its CA's certificate (it checks its peers and clients with it) and its
// serving and peer pairs. The CA's key and the health-check client's
// pair are root's.
var etcdOwnFiles = []string{"ca.crt", "server.crt", "server.key", "peer.crt", "peer.key"}

// fileRule says what the files a glob matches (under the host's root)
// are: their mode, and whether they are etcd's or root's.
type fileRule struct {
	glob string
	mode os.FileMode
	etcd bool
}

// kubeadmFiles are kubeadm's files, the kubelet configuration's, the
// PKI's and CNI's, with their modes and owners; the first rule that
// matches a file decides. legacy keeps etcd's files in the PKI directory
// etcd's (legacyEtcdPKI).
func kubeadmFiles(legacy bool) []fileRule {
	pki := KubernetesPKIDir
	rules := []fileRule{
		{glob: "/etc/kubernetes/*.conf", mode: ownerOnly},
		{glob: ManifestsDir + "/*.yaml", mode: ownerOnly},
		{glob: pki + "/*.crt", mode: ownerOnly},
		{glob: pki + "/*.key", mode: ownerOnly},
		{glob: pki + "/*.pub", mode: ownerOnly},
	}
	if legacy {
		for _, name := range etcdOwnFiles {
			rules = append(rules, fileRule{glob: pki + "/etcd/" + name, mode: ownerOnly, etcd: true})
		}
	}
	return append(rules,
		fileRule{glob: pki + "/etcd/*.crt", mode: ownerOnly},
		fileRule{glob: pki + "/etcd/*.key", mode: ownerOnly},
		fileRule{glob: layout.EtcdOwnPKIDir + "/*", mode: ownerOnly, etcd: true},
		fileRule{glob: KubeletConfigFile, mode: ownerOnly},
		fileRule{glob: KubeletFlagsFile, mode: ownerOnly},
		fileRule{glob: kubeletInstanceFile, mode: ownerOnly},
		fileRule{glob: filepath.Dir(CNIConflist) + "/*", mode: ownerOnly},
	)
}

// dirRule says what a directory of kubeadm's is; etcdGroup makes etcd its
// group, etcdOwner its owner.
type dirRule struct {
	path                 string
	mode                 os.FileMode
	etcdGroup, etcdOwner bool
}

func kubeadmDirs(legacy bool) []dirRule {
	etcdDir := dirRule{path: KubernetesPKIDir + "/etcd", mode: ownerOnlyDir}
	if legacy {
		etcdDir = dirRule{path: KubernetesPKIDir + "/etcd", mode: etcdPKIDirMode, etcdGroup: true}
	}
	return []dirRule{
		{path: ManifestsDir, mode: ownerOnlyDir},
		{path: KubernetesPKIDir, mode: ownerOnlyDir},
		etcdDir,
		{path: layout.EtcdOwnPKIDir, mode: ownerOnlyDir, etcdGroup: true, etcdOwner: true},
	}
}

// legacyEtcdPKI reports whether this node's etcd still reads its files in
// KubernetesPKIDir/etcd: its static pod was written by an earlier release
// and names no EtcdOwnPKIDir. Its files stay etcd's there until the next
// Kubernetes upgrade writes the pod again (kubeadmconfig.Patches).
func legacyEtcdPKI(h *Flow) bool {
	b, err := os.ReadFile(h.Path(layout.EtcdManifest))
	return err == nil && !strings.Contains(string(b), layout.EtcdOwnPKIDir)
}

// meta is what a file or directory is to be: its mode (0: any) and its
// owner.
type meta struct {
	mode     os.FileMode
	uid, gid int
}

// etcdServerCert is etcd's serving certificate: a node that has it runs
// a local etcd member, whose data directory is etcd's.
const etcdServerCert = KubernetesPKIDir + "/etcd/server.crt"

// eachKubeadmFile calls fn with every file and directory of kubeadmFiles,
// kubeadmDirs and etcd's data directory (and everything in it) that is on
// the host, and what it is to be. etcd's account is looked up once, and
// only for a node with etcd's files.
func eachKubeadmFile(h *Flow, fn func(p string, want meta) error) error {
	var etcd *kubeadmconfig.EtcdUser
	etcdIDs := func() (kubeadmconfig.EtcdUser, error) {
		if etcd == nil {
			u, err := etcdUser(h)
			if err != nil {
				return u, err
			}
			etcd = &u
		}
		return *etcd, nil
	}
	legacy := legacyEtcdPKI(h)
	for _, d := range kubeadmDirs(legacy) {
		if _, err := os.Lstat(h.Path(d.path)); err != nil {
			continue
		}
		want := meta{mode: d.mode}
		if d.etcdGroup || d.etcdOwner {
			u, err := etcdIDs()
			if err != nil {
				return err
			}
			if d.etcdGroup {
				want.gid = u.GID
			}
			if d.etcdOwner {
				want.uid = u.UID
			}
		}
		if err := fn(d.path, want); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, r := range kubeadmFiles(legacy) {
		matches, err := filepath.Glob(h.Path(r.glob))
		if err != nil {
			return err
		}
		for _, m := range matches {
			p := "/" + filepath.ToSlash(mustRel(h.Root, m))
			if seen[p] {
				continue
			}
			seen[p] = true
			want := meta{mode: r.mode}
			if r.etcd {
				u, err := etcdIDs()
				if err != nil {
					return err
				}
				want.uid, want.gid = u.UID, u.GID
			}
			if err := fn(p, want); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat(h.Path(etcdServerCert)); err != nil {
		return nil
	}
	u, err := etcdIDs()
	if err != nil {
		return err
	}
	return filepath.WalkDir(h.Path(layout.EtcdDataDir), func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		want := meta{uid: u.UID, gid: u.GID}
		p := "/" + filepath.ToSlash(mustRel(h.Root, full))
		if p == layout.EtcdDataDir {
			want.mode = ownerOnlyDir
		}
		return fn(p, want)
	})
}

// copyEtcdOwnFiles copies etcdOwnFiles into layout.EtcdOwnPKIDir where
// they differ (made 0700 first; eachKubeadmFile then makes it and them
// etcd's). kubeadm renews them in place on an upgrade; the next pass
// copies the new ones, which etcd reads at its next handshake.
func copyEtcdOwnFiles(h *Flow) error {
	if err := os.MkdirAll(h.Path(layout.EtcdOwnPKIDir), ownerOnlyDir); err != nil {
		return fmt.Errorf("etcd's certificates directory: %w", err)
	}
	for _, name := range etcdOwnFiles {
		b, err := os.ReadFile(h.Path(KubernetesPKIDir + "/etcd/" + name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a joining member before kubeadm made its pairs
		}
		if err != nil {
			return fmt.Errorf("etcd's %s: %w", name, err)
		}
		if _, err := h.WriteIfChanged(layout.EtcdOwnPKIDir+"/"+name, b, ownerOnly); err != nil {
			return fmt.Errorf("etcd's copy of %s: %w", name, err)
		}
	}
	return nil
}

// checkEtcdOwnFiles says which of etcd's copies differs from kubeadm's.
func checkEtcdOwnFiles(h *Flow) error {
	for _, name := range etcdOwnFiles {
		orig, err := os.ReadFile(h.Path(KubernetesPKIDir + "/etcd/" + name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("etcd's %s: %w", name, err)
		}
		cp, err := os.ReadFile(h.Path(layout.EtcdOwnPKIDir + "/" + name))
		if err != nil {
			return fmt.Errorf("etcd's copy of %s: %w", name, err)
		}
		if string(cp) != string(orig) {
			return fmt.Errorf("%s/%s differs from kubeadm's %s/etcd/%s", layout.EtcdOwnPKIDir, name, KubernetesPKIDir, name)
		}
	}
	return nil
}

// mustRel is full relative to root (full is under root).
func mustRel(root, full string) string {
	rel, err := filepath.Rel(root, full)
	if err != nil {
		return full
	}
	return rel
}

// tightenKubeadmFiles gives each of kubeadm's files and directories on the
// host its mode and owner (eachKubeadmFile), where they differ, and makes
// etcd's data directory, etcd's, once etcd's certificates exist: before
// kubeadm's etcd phase writes etcd's static pod (kubeadm would make it
// root's, and etcd could not write it).
func tightenKubeadmFiles(h *Flow) error {
	if _, err := os.Stat(h.Path(etcdServerCert)); err == nil {
		if err := os.MkdirAll(h.Path(layout.EtcdDataDir), ownerOnlyDir); err != nil {
			return fmt.Errorf("etcd's data directory: %w", err)
		}
	}
	if _, err := os.Stat(h.Path(KubernetesPKIDir + "/etcd/ca.crt")); err == nil {
		if err := copyEtcdOwnFiles(h); err != nil {
			return err
		}
	}
	return eachKubeadmFile(h, func(p string, want meta) error { return setMeta(h, p, want) })
}

// checkKubeadmFiles says what of tightenKubeadmFiles' work is not done.
func checkKubeadmFiles(h *Flow) error {
	if _, err := os.Stat(h.Path(etcdServerCert)); err == nil {
		if _, err := os.Stat(h.Path(layout.EtcdDataDir)); err != nil {
			return &os.PathError{Op: "stat", Path: layout.EtcdDataDir, Err: err}
		}
	}
	if _, err := os.Stat(h.Path(KubernetesPKIDir + "/etcd/ca.crt")); err == nil {
		if err := checkEtcdOwnFiles(h); err != nil {
			return err
		}
	}
	return eachKubeadmFile(h, func(p string, want meta) error { return checkMeta(h, p, want) })
}

// owner is a file's owner; ok is false where the file system says none.
func owner(fi os.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// setMeta gives p (not what a link points to) want's mode and owner where
// they differ.
func setMeta(h *Flow, p string, want meta) error {
	full := h.Path(p)
	fi, err := os.Lstat(full)
	if err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if uid, gid, ok := owner(fi); !ok || uid != want.uid || gid != want.gid {
		if err := os.Lchown(full, want.uid, want.gid); err != nil {
			return &os.PathError{Op: "chown", Path: p, Err: err}
		}
	}
	if want.mode != 0 && fi.Mode().Perm() != want.mode && fi.Mode()&fs.ModeSymlink == 0 {
		if err := os.Chmod(full, want.mode); err != nil {
			return &os.PathError{Op: "chmod", Path: p, Err: err}
		}
	}
	return nil
}

// checkMeta says how p differs from want.
func checkMeta(h *Flow, p string, want meta) error {
	fi, err := os.Lstat(h.Path(p))
	if err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if want.mode != 0 && fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm() != want.mode {
		return fmt.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), want.mode)
	}
	if uid, gid, ok := owner(fi); ok && (uid != want.uid || gid != want.gid) {
		return fmt.Errorf("%s is owned by %d:%d, want %d:%d", p, uid, gid, want.uid, want.gid)
	}
	return nil
}

// etcdUser is the etcd account of the host's /etc/passwd.
func etcdUser(h *Flow) (kubeadmconfig.EtcdUser, error) {
	u, err := h.LookupUser(layout.EtcdUser)
	if err != nil {
		return kubeadmconfig.EtcdUser{}, fmt.Errorf("etcd's account: %w", err)
	}
	if u.UID == 0 {
		return kubeadmconfig.EtcdUser{}, fmt.Errorf("etcd's account: /etc/passwd gives %s the ID of root", layout.EtcdUser)
	}
	return kubeadmconfig.EtcdUser{UID: u.UID, GID: u.GID}, nil
}

// ensureEtcdUser returns the etcd account, made first when the host's
// /etc/passwd lacks it: the image's has it, but /etc is an overlay on
// TERRA-STATE, and a node whose /etc/passwd changed under an earlier
// release (its admin's account) keeps that copy. systemd-sysusers makes
// it as the image declares it (layout.SysusersFile), with its ID.
func ensureEtcdUser(ctx context.Context, h *Flow) (kubeadmconfig.EtcdUser, error) {
	u, err := etcdUser(h)
	if !errors.Is(err, host.ErrNoUser) {
		return u, err
	}
	if err := h.Run(ctx, "systemd-sysusers", layout.SysusersFile); err != nil {
		return u, fmt.Errorf("make etcd's account: %w", err)
	}
	u, err = etcdUser(h)
	if err != nil {
		return u, fmt.Errorf("%w (after systemd-sysusers %s: does the image declare it?)", err, layout.SysusersFile)
	}
	return u, nil
}

// filesPhase is PhaseKubernetesFiles: on a cluster node, kubeadm's files
// as kubeadmFiles says (etcd's account made first on a control plane).
func (f *Flow) filesPhase() phase.Phase {
	return phase.Phase{
		Name: PhaseKubernetesFiles,
		Apply: func(ctx context.Context, c *machineconfig.Config) error {
			if c.Cluster == nil {
				return nil
			}
			if c.Cluster.IsControlPlane() {
				if _, err := ensureEtcdUser(ctx, f); err != nil {
					return err
				}
			}
			return tightenKubeadmFiles(f)
		},
		Verify: func(ctx context.Context, c *machineconfig.Config) error {
			if c.Cluster == nil {
				return nil
			}
			return checkKubeadmFiles(f)
		},
	}
}
