// Package bundle reads image bundles and turns them into one OCI image
// layout.
//
// A bundle is a versioned YAML document listing container images under their
// full upstream names, each with exactly one source:
//
//	apiVersion: terrarium.dev/v1alpha1
//	kind: Bundle
//	name: test-apps
//	version: 0.1.0
//	platforms: [linux/amd64]               # the default
//	images:
//	  - name: registry.k8s.io/pause:3.10
//	    source:
//	      registry: {ref: registry.k8s.io/pause@sha256:<digest>}  # pinned
//	  - name: docker.io/library/hello:1.0
//	    source:
//	      build: {go: ./testimages/hello}  # a Go main package
//	      digest: sha256:<digest>          # optional pin, for any source
//	  - name: quay.io/x/y:1
//	    source:
//	      layout: {path: ./oci, ref: quay.io/x/y:1}
//	  - name: ghcr.io/x/z:1
//	    source:
//	      tarball: {path: ./z.tar}         # docker save or OCI archive
//
// Parse reads and validates a bundle. Resolve turns every image into a
// v1.Image (or, for several platforms, a v1.ImageIndex) backed by a
// content-addressed cache, so a rebuild pulls and builds nothing it already
// has. WriteLayout writes the resolved images into a single OCI image
// layout, each named by the annotations containerd imports images by.
package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// APIVersion and Kind identify a bundle document.
const (
	APIVersion = "terrarium.dev/v1alpha1"
	Kind       = "Bundle"
)

// DefaultPlatform is the platform of a bundle that names none.
const DefaultPlatform = "linux/amd64"

// Bundle is a versioned list of container images.
type Bundle struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// Name of the bundle, e.g. "test-apps".
	Name string `yaml:"name"`
	// Version of the bundle, e.g. "0.1.0".
	Version string `yaml:"version"`
	// Platforms every image is resolved for, as os/arch[/variant]; the
	// default is [linux/amd64].
	Platforms []string `yaml:"platforms,omitempty"`
	// SourceDateEpoch is the time (Unix seconds) stamped into the images
	// the bundle builds. Set it when the bundle pins the digests of built
	// images, so that they do not depend on the build spec that uses the
	// bundle; without it, builds use the spec's (or SOURCE_DATE_EPOCH).
	SourceDateEpoch int64 `yaml:"sourceDateEpoch,omitempty"`
	// Images in the bundle, each under its full upstream name.
	Images []Image `yaml:"images"`

	// dir is the directory relative source paths are resolved against.
	dir string
	// file is the path the bundle was parsed from, for messages.
	file string
}

// Image is one image of a bundle.
type Image struct {
	// Name is the full upstream reference with a tag and a registry host,
	// e.g. registry.k8s.io/pause:3.10 or docker.io/library/nginx:1.27.
	Name   string `yaml:"name"`
	Source Source `yaml:"source"`
	// Alternatives are other sources of the same image, used instead of
	// Source when a build asks for their kind (WithPreferredSource): a
	// bundle that builds its images can list where a connected host would
	// pull them from. A registry alternative may name a tag before its
	// digest is known, but is only used once it is pinned.
	Alternatives []Source `yaml:"alternatives,omitempty"`
}

// Source says where an image comes from. Exactly one of Registry, Build,
// Layout and Tarball is set.
type Source struct {
	Registry *RegistrySource `yaml:"registry,omitempty"`
	Build    *BuildSource    `yaml:"build,omitempty"`
	Layout   *LayoutSource   `yaml:"layout,omitempty"`
	Tarball  *TarballSource  `yaml:"tarball,omitempty"`
	// Digest optionally pins what the source resolves to, after platform
	// selection (for a registry index narrowed to one platform, that
	// platform's image manifest): resolving to anything else is an error.
	Digest string `yaml:"digest,omitempty"`
}

// RegistrySource pulls an image from a registry.
type RegistrySource struct {
	// Ref is the image reference, pinned by digest:
	// registry.k8s.io/pause@sha256:<digest>.
	Ref string `yaml:"ref"`
	// Insecure allows plain HTTP and skips TLS verification.
	Insecure bool `yaml:"insecure,omitempty"`
}

// BuildSource builds a minimal image from Go source: either a main package
// of the bundle's own (Go), or programs of a component (a nested module
// under components/ that pins an upstream project; see pkg/image/gobuild).
type BuildSource struct {
	// Go is the main package's directory, relative to the bundle file.
	Go string `yaml:"go,omitempty"`
	// Component is a component's directory, relative to the bundle file.
	Component string `yaml:"component,omitempty"`
	// Programs are the component's programs the image carries.
	Programs []string `yaml:"programs,omitempty"`
	// BinDir is where the programs go in the image: the default is /usr/local/bin
	// for a component's programs and / for a Go package.
	BinDir string `yaml:"binDir,omitempty"`
	// Debian adds a first layer of Debian packages (userland that a
	// program execs, such as iptables for kube-proxy).
	Debian *DebianLayer `yaml:"debian,omitempty"`
	// Entrypoint of the image; the default is [<binDir>/<first program>].
	Entrypoint []string `yaml:"entrypoint,omitempty"`
	// Env holds KEY=value entries of the image's environment.
	Env []string `yaml:"env,omitempty"`
}

// DebianLayer is a layer of Debian packages, unpacked without maintainer
// scripts (mmdebstrap --variant=extract), with documentation stripped.
type DebianLayer struct {
	Suite  string `yaml:"suite"`
	Mirror string `yaml:"mirror,omitempty"`
	// Packages to unpack, with their dependencies; pkg=version pins one.
	Packages []string `yaml:"packages"`
	// Links are symbolic links to add (path in the image: target), for
	// what maintainer scripts would have set up, such as alternatives.
	Links map[string]string `yaml:"links,omitempty"`
	// Lock lists the exact .deb files the layer is made of (Packages and
	// their dependencies, as resolved by LockDebian; `make pin` writes it
	// for the Kubernetes bundle). With a lock, a build fetches these files
	// from Mirror, verifies each against its sha256 and keeps it in the
	// cache by content: the layer no longer depends on what the archive
	// holds on the day of the build. Without one, the packages are resolved
	// in the archive at build time.
	Lock []DebianPackage `yaml:"lock,omitempty"`
}

// DebianPackage is one .deb file of a locked Debian layer.
type DebianPackage struct {
	Package string `yaml:"package"`
	Version string `yaml:"version"`
	// File is the path under the mirror (the Filename field of the
	// archive's Packages index): pool/main/g/glibc/libc6_..._amd64.deb.
	File   string `yaml:"file"`
	SHA256 string `yaml:"sha256"`
}

// LayoutSource reads an image from an OCI image layout directory.
type LayoutSource struct {
	// Path of the layout directory, relative to the bundle file.
	Path string `yaml:"path"`
	// Ref picks the image by its org.opencontainers.image.ref.name (or
	// io.containerd.image.name) annotation; without it the layout must
	// hold a single image.
	Ref string `yaml:"ref,omitempty"`
}

// TarballSource reads an image from a `docker save` archive or an OCI
// archive (a tar of an OCI image layout).
type TarballSource struct {
	// Path of the archive, relative to the bundle file.
	Path string `yaml:"path"`
	// Ref picks the image when the archive holds several.
	Ref string `yaml:"ref,omitempty"`
}

// Parse reads a bundle file strictly (unknown fields are errors), fills in
// defaults and validates it. Its errors name the file, the field's path and
// line, e.g. "bundles/x.yaml: $.images[2].source.registry.ref: ...".
func Parse(path string) (*Bundle, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	var b Bundle
	if err := strictyaml.Unmarshal(data, &b); err != nil {
		return nil, fileError(path, err)
	}
	abs, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", path, err)
	}
	b.dir, b.file = abs, path
	b.setDefaults()
	if err := b.Validate(); err != nil {
		if p, ok := errors.AsType[strictyaml.Problems](err); ok {
			err = p.WithLines(data)
		}
		return nil, fileError(path, err)
	}
	return &b, nil
}

func fileError(path string, err error) error {
	if p, ok := errors.AsType[strictyaml.Problems](err); ok {
		return p.WithFile(path)
	}
	return fmt.Errorf("bundle %s: %w", path, err)
}

// Dir is the directory the bundle's relative paths are resolved against:
// the bundle file's directory, or the working directory for a bundle that
// was not parsed from a file.
func (b *Bundle) Dir() string { return b.dir }

// File is the path the bundle was parsed from, or "" for a bundle built in
// code.
func (b *Bundle) File() string { return b.file }

// Abs makes a bundle-relative path absolute.
func (b *Bundle) Abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if b.dir == "" {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return filepath.Join(b.dir, p)
}

func (b *Bundle) setDefaults() {
	if len(b.Platforms) == 0 {
		b.Platforms = []string{DefaultPlatform}
	}
}

// label names the bundle in messages: its file, or its name.
func (b *Bundle) label() string {
	if b.file != "" {
		return b.file
	}
	if b.Name != "" {
		return "bundle " + b.Name
	}
	return "bundle"
}

// kinds lists the source kinds that are set, in declaration order.
func (s Source) kinds() []string {
	var k []string
	if s.Registry != nil {
		k = append(k, "registry")
	}
	if s.Build != nil {
		k = append(k, "build")
	}
	if s.Layout != nil {
		k = append(k, "layout")
	}
	if s.Tarball != nil {
		k = append(k, "tarball")
	}
	return k
}
