// Package sbom writes an image's software bill of materials: a CycloneDX
// 1.6 JSON document (github.com/CycloneDX/cyclonedx-go) listing every
// Debian package of the root filesystem, every Go module the node's
// programs were built from, and every container image the slot's bundle
// carries, each with a package URL. The same inputs give the same bytes:
// the timestamp is the build's epoch and the serial number is derived from
// the content.
package sbom

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// FileName is the SBOM's name beside the image's outputs and in its
// upgrade file.
const FileName = "sbom.cdx.json"

// Inputs is what an image is made of.
type Inputs struct {
	// Name and Version of the image.
	Name, Version string
	// Epoch is the build's time.
	Epoch time.Time
	// Suite is the Debian suite of the root filesystem (trixie).
	Suite string
	// Debian maps each installed package to its version.
	Debian map[string]string
	// Programs are the node programs built from pinned Go sources.
	Programs []Program
	// Images are the container images of the slot's bundle.
	Images []Image
}

// Program is one program built from a pinned Go module.
type Program struct {
	// Module is the module and version it was built from,
	// "k8s.io/kubernetes@v1.36.3".
	Module string
	// Path is where the program is installed in the slot.
	Path string
}

// Image is one container image of the bundle.
type Image struct {
	// Name is its full name with a tag, "registry.k8s.io/pause:3.10.2".
	Name string
	// Digest is its manifest's (or index's) digest, "sha256:...".
	Digest string
}

// Build makes the BOM of in.
func Build(in Inputs) (*cdx.BOM, error) {
	var comps []cdx.Component
	for _, name := range slices.Sorted(maps.Keys(in.Debian)) {
		v := in.Debian[name]
		comps = append(comps, cdx.Component{
			BOMRef: debPURL(name, v, in.Suite), Type: cdx.ComponentTypeLibrary, Name: name, Version: v,
			PackageURL: debPURL(name, v, in.Suite),
		})
	}
	modules := map[string][]string{} // module@version -> installed paths
	for _, p := range in.Programs {
		if p.Module == "" {
			return nil, fmt.Errorf("program %s names no module", p.Path)
		}
		modules[p.Module] = append(modules[p.Module], p.Path)
	}
	for _, mv := range slices.Sorted(maps.Keys(modules)) {
		// A module without a version is the image's own source (a
		// component's module in this repository).
		mod, v, versioned := strings.Cut(mv, "@")
		paths := modules[mv]
		sort.Strings(paths)
		var props []cdx.Property
		for _, p := range paths {
			props = append(props, cdx.Property{Name: "terrarium:installed", Value: p})
		}
		purl := "pkg:golang/" + mod
		if versioned {
			purl += "@" + escape(v)
		} else {
			props = append(props, cdx.Property{Name: "terrarium:source", Value: "this image's own repository"})
		}
		comps = append(comps, cdx.Component{
			BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: mod, Version: v, PackageURL: purl, Properties: &props,
		})
	}
	images := append([]Image(nil), in.Images...)
	sort.Slice(images, func(i, j int) bool { return images[i].Name < images[j].Name })
	for _, img := range images {
		purl, err := ociPURL(img)
		if err != nil {
			return nil, err
		}
		algo, hex, _ := strings.Cut(img.Digest, ":")
		if algo != "sha256" || len(hex) != 64 {
			return nil, fmt.Errorf("image %s: digest %q is not a sha256 digest", img.Name, img.Digest)
		}
		comps = append(comps, cdx.Component{
			BOMRef: purl, Type: cdx.ComponentTypeContainer, Name: img.Name, Version: img.Digest, PackageURL: purl,
			Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex}},
		})
	}
	if len(comps) == 0 {
		return nil, errNoComponents
	}
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Timestamp: in.Epoch.UTC().Format(time.RFC3339),
		Component: &cdx.Component{
			BOMRef: "terrarium-image:" + in.Name + "@" + in.Version, Type: cdx.ComponentTypeOS,
			Name: in.Name, Version: in.Version,
		},
	}
	bom.Components = &comps
	// The serial number is the content's: the same image, the same BOM.
	sum := sha256.New()
	// A hash never fails a write.
	_, _ = fmt.Fprintf(sum, "%s\x00%s\x00%s\x00", in.Name, in.Version, bom.Metadata.Timestamp)
	for _, c := range comps {
		_, _ = fmt.Fprintf(sum, "%s\x00", c.BOMRef)
	}
	b := sum.Sum(nil)
	b[6], b[8] = b[6]&0x0f|0x50, b[8]&0x3f|0x80 // a name-based (v5-shaped) UUID
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	return bom, nil
}

// Write writes the BOM of in to w as CycloneDX 1.6 JSON and returns how
// many components it lists.
func Write(w io.Writer, in Inputs) (int, error) {
	bom, err := Build(in)
	if err != nil {
		return 0, fmt.Errorf("SBOM: %w", err)
	}
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).SetEscapeHTML(false).EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return 0, fmt.Errorf("SBOM: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return len(*bom.Components), err
}

// debPURL is a Debian package's package URL.
func debPURL(name, version, suite string) string {
	return "pkg:deb/debian/" + name + "@" + escape(version) + "?arch=amd64&distro=debian-" + suite
}

// ociPURL is a container image's package URL: the last path element as
// its name, the digest as its version, the repository and tag as
// qualifiers.
func ociPURL(img Image) (string, error) {
	repo, tag, ok := cutTag(img.Name)
	if !ok || !strings.Contains(repo, "/") {
		return "", fmt.Errorf("image %q is not a full name with a registry host and a tag", img.Name)
	}
	name := repo[strings.LastIndex(repo, "/")+1:]
	return "pkg:oci/" + name + "@" + escape(img.Digest) + "?repository_url=" + escape(repo) + "&tag=" + escape(tag), nil
}

// cutTag splits "host/path:tag" at the tag's colon (not a host's port).
func cutTag(ref string) (repo, tag string, ok bool) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, "", false
	}
	return ref[:i], ref[i+1:], true
}

// escape percent-encodes what a package URL's version or qualifier value
// may not hold: every byte but letters, digits and ".-_~/".
func escape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte(".-_~/", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// errNoComponents: an SBOM of nothing.
var errNoComponents = errors.New("lists no component")
