package clustersecrets

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
)

// secretsEncryptionKeyBytes is the size of the secrets encryption key
// (kube-apiserver's secretbox provider takes 32 bytes).
const secretsEncryptionKeyBytes = 32

// EnsureSecretsEncryptionKey gives s a secrets encryption key when it has
// none (secrets made before there was one), drawn from random (nil:
// crypto/rand.Reader), and reports whether it added one. The caller saves
// s so that the key is kept: a cluster's Secrets in etcd, and its
// backups, are unreadable without it. A key s already has is left alone.
func (s *Secrets) EnsureSecretsEncryptionKey(random io.Reader) (bool, error) {
	if s.SecretsEncryptionKey != "" {
		return false, nil
	}
	if random == nil {
		random = rand.Reader
	}
	key := make([]byte, secretsEncryptionKeyBytes)
	if _, err := io.ReadFull(random, key); err != nil {
		return false, fmt.Errorf("make the secrets encryption key: %w", err)
	}
	s.SecretsEncryptionKey = base64.StdEncoding.EncodeToString(key)
	return true, nil
}

// RotateSecretsEncryptionKey makes a new secrets encryption key, drawn
// from random (nil: crypto/rand.Reader), moves the current one to the
// front of RetiredSecretsEncryptionKeys, and raises ConfigGeneration, so
// that the configs made next are changes the nodes accept. The caller
// saves s.
func (s *Secrets) RotateSecretsEncryptionKey(random io.Reader) error {
	old := s.SecretsEncryptionKey
	s.SecretsEncryptionKey = ""
	if _, err := s.EnsureSecretsEncryptionKey(random); err != nil {
		s.SecretsEncryptionKey = old
		return fmt.Errorf("rotate the secrets encryption key: %w", err)
	}
	if old != "" {
		s.RetiredSecretsEncryptionKeys = append([]string{old}, s.RetiredSecretsEncryptionKeys...)
	}
	s.ConfigGeneration = s.Generation() + 1
	return nil
}

// Generation is the generation of the node configs made from s.
func (s *Secrets) Generation() uint64 {
	return max(s.ConfigGeneration, 1)
}

// encryptionKeyProblem says what is wrong with a secrets encryption key,
// or "". It never quotes the key.
func encryptionKeyProblem(key string) string {
	b, err := base64.StdEncoding.Strict().DecodeString(key)
	switch {
	case err != nil:
		return fmt.Sprintf("is not standard base64 (want %d random bytes)", secretsEncryptionKeyBytes)
	case len(b) != secretsEncryptionKeyBytes:
		return fmt.Sprintf("decodes to %d bytes; want %d", len(b), secretsEncryptionKeyBytes)
	}
	return ""
}
