package kubeadmflow

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// ownerOnly is the mode of every file this package writes for the
// kubelet, kubeadm and the control plane: kubeconfigs, manifests, PKI,
// configuration (docs/security.md).
const ownerOnly os.FileMode = 0o600

// StepSecretsEncryption is the report of a control plane whose config
// holds no secrets encryption key.
const StepSecretsEncryption = "secrets encryption"

// NoEncryptionKey is what a control plane says, once, when its cluster
// config holds no secrets encryption key.
const NoEncryptionKey = "Secrets are NOT encrypted at rest in etcd: this cluster config has no cluster.secretsEncryptionKey " +
	"(it was made before there was one); `imagebuild config cluster --secrets SECRETS` adds the key to the secrets file " +
	"and to the configs it writes, and a cluster formed from those encrypts its Secrets"

// writeWithMode writes data to p with mode (WriteIfChanged also gives a
// file that held data already that mode).
func writeWithMode(h *Flow, p string, data []byte, mode os.FileMode) error {
	_, err := h.WriteIfChanged(p, data, mode)
	return err
}

// checkMode says what is wrong when p does not have mode.
func checkMode(h *Flow, p string, mode os.FileMode) error {
	fi, err := os.Stat(h.Path(p))
	if err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if fi.Mode().Perm() != mode {
		return fmt.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), mode)
	}
	return nil
}

// applyControlPlaneFiles writes what kube-apiserver reads beside its
// flags (the audit policy, Pod Security's admission configuration, and
// the encryption configuration when the config holds a key), root's
// alone, and makes the audit log's directory on STATE. The init node's
// ClusterConfiguration names them, and joining control planes take it
// from the cluster: every control plane writes them before kubeadm runs.
func applyControlPlaneFiles(h *Flow, c *machineconfig.Cluster) error {
	files, err := kubeadmconfig.ControlPlaneFiles(c)
	if err != nil {
		return err
	}
	for _, p := range sortedKeys(files) {
		data := files[p]
		if p == layout.EncryptionConfigFile {
			if data, err = keptEncryptionConfig(h, c, data); err != nil {
				return err
			}
		}
		if err := writeWithMode(h, p, data, ownerOnly); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(h.Path(layout.AuditLogDir), 0o700); err != nil {
		return fmt.Errorf("the audit log's directory: %w", err)
	}
	if err := os.Chmod(h.Path(layout.AuditLogDir), 0o700); err != nil {
		return fmt.Errorf("the audit log's directory: %w", err)
	}
	if c.SecretsEncryptionKey == "" {
		h.Report.Report(StepSecretsEncryption, step.Off, NoEncryptionKey)
	}
	return nil
}

// keptEncryptionConfig is what the encryption configuration is to hold
// (pkg/node/kube/secretskeys moves it on from there):
//   - the file as it is when it is a stage of c's keys;
//   - prepare (writes with the newest retired key, reads every key) when
//     the file is there for other keys: a signed change brought a new key,
//     which the other control planes may not read yet;
//   - on a node that has none yet (forming, joining, restoring), write:
//     it writes with the current key, which the cluster's control planes
//     read unless a rotation is under way, and reads every key, those of
//     a restored backup's Secrets too.
func keptEncryptionConfig(h *Flow, c *machineconfig.Cluster, prepare []byte) ([]byte, error) {
	got, err := os.ReadFile(h.Path(layout.EncryptionConfigFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kubeadmconfig.EncryptionConfig(c, kubeadmconfig.EncryptionWrite)
	case err != nil:
		return nil, err
	}
	if _, ok := kubeadmconfig.EncryptionStageOf(c, got); ok {
		return got, nil
	}
	return prepare, nil
}

// verifyControlPlaneFiles checks what applyControlPlaneFiles writes.
func verifyControlPlaneFiles(h *Flow, c *machineconfig.Cluster) error {
	files, err := kubeadmconfig.ControlPlaneFiles(c)
	if err != nil {
		return err
	}
	for _, p := range sortedKeys(files) {
		got, err := os.ReadFile(h.Path(p))
		if err != nil {
			return &os.PathError{Op: "read", Path: p, Err: err}
		}
		if p == layout.EncryptionConfigFile {
			if _, ok := kubeadmconfig.EncryptionStageOf(c, got); !ok {
				return fmt.Errorf("%s is not written for the machine config's secrets encryption keys", p)
			}
		} else if string(got) != string(files[p]) {
			return fmt.Errorf("%s differs from the machine config", p)
		}
		if err := checkMode(h, p, ownerOnly); err != nil {
			return err
		}
	}
	return checkMode(h, layout.AuditLogDir, 0o700)
}
