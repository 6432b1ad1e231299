package clustersecrets

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// EnsureSigningKey gives s a config signing key when it has none (secrets
// made before there was one), drawn from random (nil: crypto/rand.Reader),
// and reports whether it added one. The caller saves s so that the key is
// kept: every config signed with it relies on it. A key s already has is
// left alone.
func (s *Secrets) EnsureSigningKey(random io.Reader) (bool, error) {
	if s.SigningKey != "" {
		return false, nil
	}
	if random == nil {
		random = rand.Reader
	}
	_, key, err := ed25519.GenerateKey(random)
	if err != nil {
		return false, fmt.Errorf("make the config signing key: %w", err)
	}
	pemBytes, err := signature.MarshalPrivateKey(key)
	if err != nil {
		return false, fmt.Errorf("make the config signing key: %w", err)
	}
	s.SigningKey = string(pemBytes)
	return true, nil
}

// SigningPrivateKey returns the cluster's config signing key, or an error
// wrapping ErrNoSigningKey when s has none.
func (s *Secrets) SigningPrivateKey() (ed25519.PrivateKey, error) {
	if s.SigningKey == "" {
		return nil, ErrNoSigningKey
	}
	key, err := signature.ParsePrivateKey([]byte(s.SigningKey))
	if err != nil {
		return nil, fmt.Errorf("the config signing key (signingKey): %w", err)
	}
	return key, nil
}

// SigningPublicKey returns the public half of the cluster's config signing
// key: what node configs list in trustedKeys.
func (s *Secrets) SigningPublicKey() (signature.PublicKey, error) {
	key, err := s.SigningPrivateKey()
	if err != nil {
		return signature.PublicKey{}, err
	}
	return signature.PublicKeyOf(key), nil
}
