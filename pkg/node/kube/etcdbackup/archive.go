package etcdbackup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// etcdPeerPort is etcd's peer port (kubeadm's).
const etcdPeerPort = 2380

// bumpRevision is how far a restore moves etcd's revision past the
// snapshot's, with every older revision marked compacted: the watches of
// clients that saw the lost cluster's later revisions (kubelets, kube-
// controller-manager's informers) then restart from a list instead of
// waiting for revisions that will never come again. Kubernetes' etcd
// restore guidance asks for it; a billion is what etcd's documentation
// suggests (far more writes than any cluster makes between two snapshots).
const bumpRevision = 1_000_000_000

// ErrNoCAKey says the node cannot make or read backups: only control
// planes hold the cluster CA's key the backup passphrase derives from.
var ErrNoCAKey = errors.New("this node's config carries no cluster CA key (pki.caKey): only control planes make and restore backups")

// passphrase is the cluster's backup passphrase, from c's CA key.
func passphrase(c *machineconfig.Config) (string, error) {
	if c == nil || c.Cluster == nil || c.Cluster.PKI == nil || c.Cluster.PKI.CAKey == "" {
		return "", ErrNoCAKey
	}
	return backup.Passphrase([]byte(c.Cluster.PKI.CAKey), c.Cluster.Name)
}

// Info is what a backup records about the node beyond its config.
type Info struct {
	Release, Kubernetes string
}

// WriteBackup writes an encrypted backup of the snapshot s into dir (on
// the node, or a mounted stick) and returns its path. The file appears
// whole or not at all. It is refused before it is written when dir's file
// system lacks the room, and on TERRA-STATE (the snapshot's) the reserve
// beside it (WithSpace).
func WriteBackup(h *host.Host, c *machineconfig.Config, info Info, s Snapshot, dir string, opts ...Option) (string, error) {
	o := newOptions(opts)
	pass, err := passphrase(c)
	if err != nil {
		return "", err
	}
	pki := map[string][]byte{}
	for _, name := range backup.PKIFiles {
		b, err := os.ReadFile(h.Path(layout.KubernetesPKIDir + "/" + name))
		if err != nil {
			return "", fmt.Errorf("backup: the cluster PKI: %w", err)
		}
		pki[name] = b
	}
	if err := checkBackupSpace(o, s, pki, dir); err != nil {
		return "", fmt.Errorf("backup: %w", err)
	}
	m := backup.Manifest{
		Cluster: c.Cluster.Name, CACertHash: c.Cluster.CACertHash, Node: c.Hostname,
		TakenAt: s.TakenAt, Release: info.Release, Kubernetes: info.Kubernetes,
	}
	out := filepath.Join(dir, backup.FileName(c.Cluster.Name, c.Hostname, s.TakenAt))
	err = atomicfile.Write(out, 0o600, func(w io.Writer) error {
		return backup.Write(w, pass, m, s.Path, pki)
	})
	if err != nil {
		return "", fmt.Errorf("backup: writing %s: %w", out, err)
	}
	return out, nil
}

// checkBackupSpace refuses a backup that does not fit in dir: a stick
// needs the backup's room; TERRA-STATE (where the snapshot is) the
// reserve for etcd beside it.
func checkBackupSpace(o options, s Snapshot, pki map[string][]byte, dir string) error {
	need := diskspace.Need{
		What: "the backup", Path: dir, Bytes: backupNeed(s.Size, pki),
		Fix: "write it onto a stick with more free space (the backup is written whole or not at all)",
	}
	onState, err := diskspace.SameFS(o.space, dir, filepath.Dir(s.Path))
	if err != nil {
		return fmt.Errorf("check the free space for the backup: %w", err)
	}
	if onState {
		need.Reserve = o.reserve
		need.Fix = "write it onto a TERRA-BACKUP stick or another disk, or free space on TERRA-STATE"
	}
	return diskspace.Check(o.space, need)
}

// restoreWork is where a restore unpacks and rebuilds, beside the etcd
// data directory (the same file system, so the result moves by rename).
func restoreWork() string { return layout.EtcdDataDir + ".restore" }

// Restore rebuilds the local etcd data directory from the backup file,
// for a new init node before kubeadm starts its etcd: the backup must be
// of this node's cluster (its CA and service-account key the config's),
// and the member it makes is this node (its name and peer URL kubeadm's).
// Whatever is in the data directory is replaced: the caller runs it only
// while no etcd has run on this formation (a data directory there is an
// interrupted restore's, or stale). It returns the backup's manifest.
func Restore(ctx context.Context, h *host.Host, c *machineconfig.Config, file string) (*backup.Manifest, error) {
	pass, err := passphrase(c)
	if err != nil {
		return nil, err
	}
	work := h.Path(restoreWork())
	if err := os.RemoveAll(work); err != nil {
		return nil, fmt.Errorf("restore: clearing %s: %w", work, err)
	}
	defer os.RemoveAll(work)
	unpacked := filepath.Join(work, "backup")
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	m, err := backup.Extract(f, pass, unpacked)
	_ = f.Close() // read only
	if err != nil {
		return nil, fmt.Errorf("restore: %s: %w", file, err)
	}
	if err := matchesNode(h, c, m, unpacked); err != nil {
		return nil, fmt.Errorf("restore: %s: %w", file, err)
	}

	if err := restoreSnapshot(ctx, h, c, filepath.Join(unpacked, backup.SnapshotName), filepath.Join(work, "data"), ""); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return m, nil
}

// RestoreSnapshot replaces the local etcd's data with a one-member etcd
// made from snapshot (a plain snapshot on STATE, etcdbackup.Take's), as
// this node (its name and peer URL kubeadm's): a single control plane's
// way back from an upgrade that moved etcd's data to a newer minor
// version. etcd must not run. The data replaced is kept beside, as
// layout.EtcdDataDir+".replaced".
func RestoreSnapshot(ctx context.Context, h *host.Host, c *machineconfig.Config, snapshot string) error {
	work := h.Path(restoreWork())
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("restore etcd: clearing %s: %w", work, err)
	}
	defer os.RemoveAll(work)
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	if err := restoreSnapshot(ctx, h, c, snapshot, filepath.Join(work, "data"), h.Path(layout.EtcdDataDir+".replaced")); err != nil {
		return fmt.Errorf("restore etcd from %s: %w", snapshot, err)
	}
	return nil
}

// restoreSnapshot makes a one-member etcd of this node from snapshot in
// data, then puts it in place of layout.EtcdDataDir: the data there is
// removed, or moved to keep when keep is set.
func restoreSnapshot(ctx context.Context, h *host.Host, c *machineconfig.Config, snapshot, data, keep string) error {
	peer := "https://" + net.JoinHostPort(c.Cluster.NodeIP, strconv.Itoa(etcdPeerPort))
	if _, err := h.Output(ctx, "etcdutl", "snapshot", "restore", snapshot,
		"--name="+c.Hostname,
		"--initial-cluster="+c.Hostname+"="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--data-dir="+data,
		"--bump-revision="+strconv.Itoa(bumpRevision),
		"--mark-compacted"); err != nil {
		return fmt.Errorf("etcdutl snapshot restore: %w", err)
	}
	if err := ownedByEtcd(h, data); err != nil {
		return err
	}
	dst := h.Path(layout.EtcdDataDir)
	if keep != "" {
		if err := os.RemoveAll(keep); err != nil {
			return err
		}
		if err := os.Rename(dst, keep); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("keep the replaced %s: %w", dst, err)
		}
	} else if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("removing the stale %s: %w", dst, err)
	}
	if err := os.Rename(data, dst); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(dst))
}

// ownedByEtcd makes everything in dir (a restored data directory, under
// the host's root) the etcd account's: etcd runs as etcd on a control
// plane (docs/security.md), and etcdutl, run as root, made it root's. A
// host without the account (formed before it) runs etcd as root, and
// leaves dir root's.
func ownedByEtcd(h *host.Host, dir string) error {
	u, err := h.LookupUser(layout.EtcdUser)
	if errors.Is(err, host.ErrNoUser) || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("etcd's account: %w", err)
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, u.UID, u.GID); err != nil {
			return fmt.Errorf("make the restored etcd data etcd's: %w", err)
		}
		return nil
	})
}

// matchesNode checks a backup against the node's config: the same
// cluster, and the same CAs and service-account key as the PKI the node
// was given (which kubeadm then uses). A snapshot under other keys would
// hold credentials nothing in the restored cluster trusts.
func matchesNode(h *host.Host, c *machineconfig.Config, m *backup.Manifest, unpacked string) error {
	cl := c.Cluster
	if m.Cluster != cl.Name {
		return fmt.Errorf("it is a backup of cluster %q, and this node's config is for cluster %q", m.Cluster, cl.Name)
	}
	if m.CACertHash != cl.CACertHash {
		return fmt.Errorf("it is a backup of a cluster whose CA is %s, and this node's config pins %s", m.CACertHash, cl.CACertHash)
	}
	for _, name := range []string{"ca.crt", "front-proxy-ca.crt", "etcd/ca.crt", "sa.pub"} {
		got, err := os.ReadFile(filepath.Join(unpacked, backup.PKIDir, name))
		if err != nil {
			return err
		}
		have, err := os.ReadFile(h.Path(layout.KubernetesPKIDir + "/" + name))
		if err != nil {
			return fmt.Errorf("this node's %s: %w", name, err)
		}
		if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(have)) {
			return fmt.Errorf("its pki/%s differs from this node's %s/%s: make the node's config disk from the secrets file the cluster was made with (imagebuild config cluster --secrets)", name, layout.KubernetesPKIDir, name)
		}
	}
	return nil
}
