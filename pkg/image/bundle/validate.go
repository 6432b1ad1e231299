package bundle

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

var (
	bundleNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	versionRE    = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_-]*$`)
	envKeyRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate collects every problem of the bundle, each tagged with the path
// of the field it is about (such as $.images[2].source.registry.ref). The
// error is a strictyaml.Problems. Validate looks at the document only:
// missing files and directories are reported by Resolve.
func (b *Bundle) Validate() error {
	var p strictyaml.Problems
	root := strictyaml.Root()
	if b.APIVersion != APIVersion {
		p.Addf(root.Field("apiVersion"), "is %q; this terrarium reads %q", b.APIVersion, APIVersion)
	}
	if b.Kind != Kind {
		p.Addf(root.Field("kind"), "is %q; write %q", b.Kind, Kind)
	}
	if !bundleNameRE.MatchString(b.Name) {
		p.Addf(root.Field("name"), "%q is not a valid bundle name (lowercase letters, digits, '.', '_', '-'; at most 63)", b.Name)
	}
	if !versionRE.MatchString(b.Version) {
		p.Addf(root.Field("version"), "%q is not a version (e.g. 0.1.0)", b.Version)
	}
	validatePlatforms(&p, root.Field("platforms"), b.Platforms)
	if b.SourceDateEpoch < 0 {
		p.Addf(root.Field("sourceDateEpoch"), "must be a Unix time in seconds, not negative")
	}
	if len(b.Images) == 0 {
		p.Addf(root.Field("images"), "lists no images")
	}
	first := map[string]int{}
	for i, img := range b.Images {
		path := root.Field("images").Index(i)
		if j, dup := first[img.Name]; dup && img.Name != "" {
			p.Addf(path.Field("name"), "%q is listed twice (first at %s)", img.Name, root.Field("images").Index(j))
		} else {
			first[img.Name] = i
		}
		validateImage(&p, path, img)
	}
	return p.Err()
}

func validatePlatforms(p *strictyaml.Problems, path strictyaml.Path, platforms []string) {
	seen := map[string]bool{}
	for i, s := range platforms {
		if msg := checkPlatform(s); msg != "" {
			p.Addf(path.Index(i), "%s", msg)
		} else if seen[s] {
			p.Addf(path.Index(i), "%q is listed twice", s)
		}
		seen[s] = true
	}
}

func validateImage(p *strictyaml.Problems, path strictyaml.Path, img Image) {
	if msg := checkImageName(img.Name); msg != "" {
		p.Addf(path.Field("name"), "%s", msg)
	}
	validateSource(p, path.Field("source"), img.Name, img.Source, false)
	for i, alt := range img.Alternatives {
		validateSource(p, path.Field("alternatives").Index(i), img.Name, alt, true)
	}
}

// validateSource checks one source of an image; an alternative's registry
// reference may be an unpinned tag.
func validateSource(p *strictyaml.Problems, spath strictyaml.Path, imgName string, src Source, alternative bool) {
	img := Image{Name: imgName}
	switch kinds := src.kinds(); len(kinds) {
	case 0:
		p.Addf(spath, "image %q has no source; set one of registry, build, layout, tarball", img.Name)
	case 1:
	default:
		p.Addf(spath, "image %q sets %s; set exactly one source", img.Name, strings.Join(kinds, " and "))
	}
	if r := src.Registry; r != nil {
		if msg := checkRegistryRef(r.Ref); msg != "" && !(alternative && checkTagRef(r.Ref) == "") {
			p.Addf(spath.Field("registry").Field("ref"), "%s", msg)
		}
	}
	if bs := src.Build; bs != nil {
		validateBuild(p, spath.Field("build"), bs)
	}
	if l := src.Layout; l != nil {
		validateLocal(p, spath.Field("layout"), l.Path, l.Ref, "layout directory")
	}
	if t := src.Tarball; t != nil {
		validateLocal(p, spath.Field("tarball"), t.Path, t.Ref, "archive")
	}
	if src.Digest != "" {
		if _, err := v1.NewHash(src.Digest); err != nil {
			p.Addf(spath.Field("digest"), "%q is not a digest; write sha256:<64 hex digits>", src.Digest)
		}
	}
}

func validateBuild(p *strictyaml.Problems, path strictyaml.Path, bs *BuildSource) {
	switch {
	case bs.Go == "" && bs.Component == "":
		p.Addf(path, "needs go (a Go main package's directory) or component (a component's directory), relative to the bundle file")
	case bs.Go != "" && bs.Component != "":
		p.Addf(path, "has both go and component; keep one")
	case bs.Component != "" && len(bs.Programs) == 0:
		p.Addf(path.Field("programs"), "is required with component (the component's programs the image carries)")
	case bs.Go != "" && len(bs.Programs) > 0:
		p.Addf(path.Field("programs"), "only goes with component")
	}
	if bs.BinDir != "" && !strings.HasPrefix(bs.BinDir, "/") {
		p.Addf(path.Field("binDir"), "%q is not an absolute path", bs.BinDir)
	}
	if d := bs.Debian; d != nil {
		dp := path.Field("debian")
		if d.Suite == "" {
			p.Addf(dp.Field("suite"), "is required (e.g. trixie)")
		}
		if len(d.Packages) == 0 {
			p.Addf(dp.Field("packages"), "is required (the packages to unpack)")
		}
		for l, t := range d.Links {
			if strings.HasPrefix(l, "/") || strings.Contains(l, "..") || t == "" {
				p.Addf(dp.Field("links").Field(l), "links are relative paths in the image with a target")
			}
		}
		validateDebianLock(p, dp.Field("lock"), d.Lock)
	}
	for i, e := range bs.Entrypoint {
		if e == "" {
			p.Addf(path.Field("entrypoint").Index(i), "is empty")
		}
	}
	for i, e := range bs.Env {
		if key, _, ok := strings.Cut(e, "="); !ok || !envKeyRE.MatchString(key) {
			p.Addf(path.Field("env").Index(i), "%q is not KEY=value", e)
		}
	}
}

func validateLocal(p *strictyaml.Problems, path strictyaml.Path, file, ref, what string) {
	if file == "" {
		p.Addf(path.Field("path"), "is required (the %s, relative to the bundle file)", what)
	}
	if ref == "" {
		return
	}
	if strings.ContainsFunc(ref, unicode.IsSpace) {
		p.Addf(path.Field("ref"), "%q is not an image name", ref)
	}
}

// checkImageName returns what is wrong with an image's name, or "".
func checkImageName(s string) string {
	switch {
	case s == "":
		return "is required (the image's full upstream name, e.g. registry.k8s.io/pause:3.10)"
	case strings.Contains(s, "@"):
		return fmt.Sprintf("%q is a digest reference; name the image by its tag (pin its content with source.digest)", s)
	}
	if msg := checkHost(s); msg != "" {
		return msg
	}
	if !hasTag(s) {
		return fmt.Sprintf("%q has no tag; write it as %s:<tag>", s, s)
	}
	if _, err := name.NewTag(s, name.StrictValidation); err != nil {
		return fmt.Sprintf("%q is not a valid image reference: %v", s, err)
	}
	return ""
}

// checkRegistryRef returns what is wrong with a registry source's ref, or "".
func checkRegistryRef(s string) string {
	switch {
	case s == "":
		return "is required (e.g. registry.k8s.io/pause@sha256:<digest>)"
	case !strings.Contains(s, "@"):
		return fmt.Sprintf("%q is not pinned; write it as name@sha256:<digest>", s)
	}
	if msg := checkHost(s); msg != "" {
		return msg
	}
	if _, err := name.NewDigest(s, name.StrictValidation); err != nil {
		return fmt.Sprintf("%q is not a valid image reference: %v", s, err)
	}
	return ""
}

// hasTag reports whether the last path component of s has a ":tag".
func hasTag(s string) bool {
	return strings.Contains(s[strings.LastIndex(s, "/")+1:], ":")
}

// checkHost requires the written reference s to start with its registry
// host, and Docker Hub names in their canonical docker.io/library/x form.
func checkHost(s string) string {
	host := hostOf(s)
	rest := strings.TrimPrefix(s, host+"/")
	switch {
	case host == "":
		return fmt.Sprintf("%q names no registry host; write the full upstream name, e.g. docker.io/library/%s", s, s)
	case host == "index.docker.io" || host == "registry-1.docker.io":
		return fmt.Sprintf("%q: write Docker Hub names as docker.io/%s", s, rest)
	case host == "docker.io" && !strings.Contains(rest, "/"):
		return fmt.Sprintf("%q: write Docker Hub names in full, as docker.io/library/%s", s, rest)
	}
	return ""
}

// hostOf returns the registry host that s starts with, or "" when its first
// component is not a host (no '.' or ':' and not localhost).
func hostOf(s string) string {
	h, _, ok := strings.Cut(s, "/")
	if !ok {
		return ""
	}
	if strings.ContainsAny(h, ".:") || h == "localhost" {
		return h
	}
	return ""
}

// checkPlatform returns what is wrong with an os/arch[/variant] platform,
// or "".
func checkPlatform(s string) string {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Sprintf("%q is not a platform; write os/arch or os/arch/variant, e.g. linux/amd64", s)
	}
	if parts[0] != "linux" {
		return fmt.Sprintf("%q: unsupported OS %q (terrarium runs linux images)", s, parts[0])
	}
	if !knownArch(parts[1]) {
		return fmt.Sprintf("%q: unknown architecture %q (known: amd64, arm64, arm, 386, ppc64le, s390x, riscv64, loong64)", s, parts[1])
	}
	if len(parts) == 3 && !knownVariant(parts[1], parts[2]) {
		return fmt.Sprintf("%q: unknown variant %q for %s", s, parts[2], parts[1])
	}
	return ""
}

func knownArch(arch string) bool {
	switch arch {
	case "amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64", "loong64":
		return true
	}
	return false
}

func knownVariant(arch, variant string) bool {
	switch arch {
	case "arm":
		return variant == "v5" || variant == "v6" || variant == "v7"
	case "arm64":
		return variant == "v8"
	case "amd64":
		return variant == "v1" || variant == "v2" || variant == "v3" || variant == "v4"
	}
	return false
}

// checkTagRef returns what is wrong with s as a reference by tag, or "".
func checkTagRef(s string) string {
	if !hasTag(s) {
		return fmt.Sprintf("%q has no tag", s)
	}
	if msg := checkHost(s); msg != "" {
		return msg
	}
	if _, err := name.NewTag(s, name.StrictValidation); err != nil {
		return fmt.Sprintf("%q is not a valid image reference: %v", s, err)
	}
	return ""
}

var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// validateDebianLock checks a Debian layer's lock: every entry names a
// package, a version, a file in the archive's pool and its sha256.
func validateDebianLock(p *strictyaml.Problems, path strictyaml.Path, lock []DebianPackage) {
	seen := map[string]bool{}
	for i, d := range lock {
		ip := path.Index(i)
		if d.Package == "" || d.Version == "" {
			p.Addf(ip, "package and version are required (run make pin to write the lock again)")
		}
		if !strings.HasPrefix(d.File, "pool/") || strings.Contains(d.File, "..") || !strings.HasSuffix(d.File, ".deb") {
			p.Addf(ip.Field("file"), "%q is not a .deb under the archive's pool/", d.File)
		}
		if !sha256HexRE.MatchString(d.SHA256) {
			p.Addf(ip.Field("sha256"), "%q is not a sha256 (64 lowercase hex digits)", d.SHA256)
		}
		if seen[d.Package] {
			p.Addf(ip.Field("package"), "%s is locked twice", d.Package)
		}
		seen[d.Package] = true
	}
}
