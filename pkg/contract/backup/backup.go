// Package backup is the format of a Terrarium cluster backup: what a
// control plane writes (`firstboot backup`, a TERRA-BACKUP stick) and what
// a new init node restores the cluster from.
//
// A backup is one file, terrarium-backup-<cluster>-<node>-<time>.age: an
// age file (https://age-encryption.org/v1) encrypted to a passphrase
// derived from the cluster CA's private key (see Passphrase), holding a
// tar of
//
//	manifest.json      what the backup is (Manifest)
//	snapshot.db        an etcd snapshot (etcdctl snapshot save)
//	pki/...            the cluster's CAs and service-account key, as
//	                   kubeadm lays them out under /etc/kubernetes/pki
//
// Only the holder of the cluster's secrets can read a backup or make one a
// node accepts: age's encryption is authenticated, so a backup that
// decrypts under the cluster's passphrase was made with it.
package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

const (
	// APIVersion is the schema version of a backup's manifest.
	APIVersion = "terrarium.dev/v1alpha1"
	// Kind is the kind of a backup's manifest.
	Kind = "ClusterBackup"

	// Suffix ends a backup's file name.
	Suffix = ".age"
	// Prefix starts a backup's file name.
	Prefix = "terrarium-backup-"

	// ManifestName is one of the archive's two fixed members.
	ManifestName = "manifest.json"
	// SnapshotName is the other fixed member.
	SnapshotName = "snapshot.db"
	// PKIDir holds the archive's other members.
	PKIDir = "pki"

	// MaxSnapshot bounds the snapshot read from a backup: etcd's largest
	// supported database (its quota's ceiling) is 8 GiB.
	MaxSnapshot = 8 << 30
	// MaxSmallFile bounds the manifest and each PKI file.
	MaxSmallFile = 64 << 10
)

// PKIFiles are the files under /etc/kubernetes/pki a backup carries (what
// kubeadm would otherwise make anew, and what every credential in the
// snapshot was issued under), by their path relative to PKIDir.
var PKIFiles = []string{
	"ca.crt", "ca.key",
	"front-proxy-ca.crt", "front-proxy-ca.key",
	"etcd/ca.crt", "etcd/ca.key",
	"sa.key", "sa.pub",
}

// Manifest says what a backup holds.
type Manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Cluster is the cluster's name and CACertHash its CA's public-key
	// hash (sha256:<hex>, as kubeadm's discovery pins it): a node
	// restores only a backup of its own cluster.
	Cluster    string `json:"cluster"`
	CACertHash string `json:"caCertHash"`
	// Node is the control plane the snapshot was taken on.
	Node string `json:"node"`
	// TakenAt is when the snapshot was taken (UTC).
	TakenAt time.Time `json:"takenAt"`
	// Release is the image version the node ran, and Kubernetes the
	// version of its control plane.
	Release    string `json:"release,omitempty"`
	Kubernetes string `json:"kubernetes,omitempty"`
	// Snapshot describes snapshot.db.
	Snapshot File `json:"snapshot"`
	// PKI describes each PKI file by its path under pki/.
	PKI map[string]File `json:"pki"`
}

// File is one member's size and digest.
type File struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

var (
	sha256RE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	caHashRE     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	nameLabelRE  = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	fileSafeRE   = regexp.MustCompile(`[^a-z0-9.-]+`)
	timeInName   = "20060102T150405Z"
	allowedInPKI = func() map[string]bool {
		m := map[string]bool{}
		for _, f := range PKIFiles {
			m[f] = true
		}
		return m
	}()
)

// FileName is the name of a backup of cluster taken on node at t.
func FileName(cluster, node string, t time.Time) string {
	return Prefix + fileSafe(cluster) + "-" + fileSafe(node) + "-" + t.UTC().Format(timeInName) + Suffix
}

// IsBackupName reports whether name (a base name) is a backup's.
func IsBackupName(name string) bool {
	return strings.HasPrefix(name, Prefix) && strings.HasSuffix(name, Suffix) && path.Base(name) == name
}

// ParseManifest reads and checks a manifest.
func ParseManifest(b []byte) (*Manifest, error) { return parseManifest[Manifest](b) }

// parseManifest reads a manifest of either format and runs its check.
func parseManifest[M any, P interface {
	*M
	check() error
}](b []byte) (*M, error) {
	var m M
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestName, err)
	}
	if err := P(&m).check(); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestName, err)
	}
	return &m, nil
}

func (m *Manifest) check() error {
	if m.APIVersion != APIVersion || m.Kind != Kind {
		return fmt.Errorf("apiVersion/kind is %q/%q, want %s/%s: not a Terrarium cluster backup", m.APIVersion, m.Kind, APIVersion, Kind)
	}
	if err := checkWhose(m.Cluster, m.CACertHash, m.Node, m.TakenAt); err != nil {
		return err
	}
	if err := m.Snapshot.check(MaxSnapshot); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	for _, name := range PKIFiles {
		f, ok := m.PKI[name]
		if !ok {
			return fmt.Errorf("pki: %s is missing", name)
		}
		if err := f.check(MaxSmallFile); err != nil {
			return fmt.Errorf("pki: %s: %w", name, err)
		}
	}
	if len(m.PKI) != len(PKIFiles) {
		for name := range m.PKI {
			if !allowedInPKI[name] {
				return fmt.Errorf("pki: %q is not a file a backup carries", name)
			}
		}
	}
	return nil
}

// checkWhose checks what names a backup's cluster, node and time.
func checkWhose(cluster, caCertHash, node string, takenAt time.Time) error {
	switch {
	case !nameLabelRE.MatchString(cluster):
		return fmt.Errorf("cluster: %q is not a cluster name", cluster)
	case !caHashRE.MatchString(caCertHash):
		return fmt.Errorf("caCertHash: %q is not sha256:<64 hex digits>", caCertHash)
	case node == "" || len(node) > 253:
		return fmt.Errorf("node: %q is not a node name", node)
	case takenAt.IsZero():
		return errors.New("takenAt: missing")
	}
	return nil
}

func (f File) check(limit int64) error {
	if f.Size <= 0 || f.Size > limit {
		return fmt.Errorf("size %d is outside 1..%d", f.Size, limit)
	}
	if !sha256RE.MatchString(f.SHA256) {
		return fmt.Errorf("sha256 %q is not 64 hex digits", f.SHA256)
	}
	return nil
}
