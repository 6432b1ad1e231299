package bundle

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// registrySource pulls an image pinned by digest: either in its reference
// (name@sha256:...) or, for a reference by tag, by the digest the image
// must resolve to (pin). Its cache key is that digest and the platforms:
// pinned content never changes, so a cached image is used without asking
// the registry.
type registrySource struct {
	ref       string
	pin       string
	insecure  bool
	platforms []v1.Platform
	keychain  authn.Keychain
}

func (s *registrySource) String() string { return "registry " + s.ref }

func (s *registrySource) parse() (name.Reference, error) {
	opts := []name.Option{name.StrictValidation}
	if s.insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(s.ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("invalid reference: %w", err)
	}
	if _, ok := ref.(name.Digest); !ok && s.pin == "" {
		return nil, fmt.Errorf("%q is not pinned; write it as name@sha256:<digest>", s.ref)
	}
	return ref, nil
}

func (s *registrySource) key(context.Context) (string, error) {
	ref, err := s.parse()
	if err != nil {
		return "", err
	}
	if d, ok := ref.(name.Digest); ok {
		return cache.NewKey("bundle-registry/v1").
			String("digest", d.DigestStr()).
			Strings("platforms", platformStrings(s.platforms)).
			Sum()
	}
	return cache.NewKey("bundle-registry-tag/v1").
		String("resolves to", s.pin).
		Strings("platforms", platformStrings(s.platforms)).
		Sum()
}

func (s *registrySource) fetch(ctx context.Context) (artifact, func(), error) {
	ref, err := s.parse()
	if err != nil {
		return artifact{}, nil, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(s.keychain)}
	if s.insecure {
		opts = append(opts, remote.WithTransport(insecureTransport()))
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return artifact{}, nil, fmt.Errorf("pull: %w", err)
	}
	var a artifact
	if desc.MediaType.IsIndex() {
		a.index, err = desc.ImageIndex()
	} else {
		a.image, err = desc.Image()
	}
	if err != nil {
		return artifact{}, nil, fmt.Errorf("pull: %w", err)
	}
	a, err = selectPlatforms(a, s.platforms)
	if err != nil {
		return artifact{}, nil, err
	}
	return a, func() {}, nil
}

// insecureTransport skips TLS verification, for registries the bundle marks
// insecure (name.Insecure already allows plain HTTP).
func insecureTransport() http.RoundTripper {
	base, ok := remote.DefaultTransport.(*http.Transport)
	if !ok {
		base = http.DefaultTransport.(*http.Transport)
	}
	t := base.Clone()
	t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the bundle asked for it
	return t
}
