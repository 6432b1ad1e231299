package upgrade

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// FormatVersion is the version of the upgrade file format this package
// writes and reads.
const FormatVersion = 1

// Member names of the manifest and its signature.
const (
	ManifestName  = "manifest.json"
	SignatureName = "manifest.json.sig"
)

// Limits of what Open reads.
const (
	// MaxManifestSize is the largest manifest.json Open reads.
	MaxManifestSize = 1 << 20
	// MaxPartSize is the largest part: what a ustar header can record
	// (8 GiB less one byte).
	MaxPartSize = 1<<33 - 1
	// maxParts bounds the manifest's parts (there are three or four).
	maxParts = 16
)

// BuiltAtLayout is the form of Manifest.BuiltAt (RFC 3339, UTC, whole
// seconds), the same as release.json's builtAt.
const BuiltAtLayout = "2006-01-02T15:04:05Z"

// Role says where a part goes on the node.
type Role string

// The roles of parts; an upgrade file has exactly one part of each of
// Roles and at most one of each of OptionalRoles.
const (
	// RoleRootfs is the slot's squashfs, written to the inactive slot's
	// partition.
	RoleRootfs Role = "rootfs"
	// RoleKernel is the slot's kernel (layout.Slot.KernelPath on the ESP).
	RoleKernel Role = "kernel"
	// RoleInitramfs is the slot's initramfs (layout.Slot.InitrdPath on
	// the ESP).
	RoleInitramfs Role = "initramfs"
	// RoleSBOM is the build's software bill of materials (CycloneDX
	// JSON, pkg/image/sbom), signed with the rest; optional, and written
	// to no disk of the node.
	RoleSBOM Role = "sbom"
	// RoleUKIA and RoleUKIB are a Secure Boot build's signed unified
	// kernel images for slot A and slot B (layout.Slot.UKIPath on the
	// ESP): the same kernel and initramfs, each with its slot's command
	// line. A node that boots UKIs installs the target slot's and needs
	// it; any other node installs the kernel and the initramfs.
	RoleUKIA Role = "uki-a"
	RoleUKIB Role = "uki-b"
)

// UKIRole is the role of slot's unified kernel image ("a" or "b").
func UKIRole(slot string) Role { return Role("uki-" + slot) }

// Roles lists the roles every upgrade file has a part of, in the order
// Write expects parts.
func Roles() []Role { return []Role{RoleRootfs, RoleKernel, RoleInitramfs} }

// OptionalRoles lists the roles an upgrade file may have a part of, after
// those of Roles.
func OptionalRoles() []Role { return []Role{RoleSBOM, RoleUKIA, RoleUKIB} }

// Manifest describes an upgrade file: the build it carries, what it may
// upgrade, and the size and SHA-256 of every part. It is the file's
// manifest.json, the member the signature covers.
type Manifest struct {
	// FormatVersion is the file format's version, FormatVersion.
	FormatVersion int `json:"formatVersion"`
	// Version is the OS version the upgrade installs (release.json's
	// version), a semantic version such as 0.2.0.
	Version string `json:"version"`
	// Compatible names the kind of appliance the upgrade is for: a node
	// installs it only when its installed release has the same name (see
	// Check).
	Compatible string `json:"compatible"`
	// MinFromVersion is the lowest installed version the upgrade may be
	// installed over (a semantic version, at most Version).
	MinFromVersion string `json:"minFromVersion"`
	// KubernetesVersion is the version of the Kubernetes node binaries and
	// control-plane images the slot carries (v1.36.3); empty when it
	// carries none.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// EtcdVersion is the version of etcd the slot's bundle carries
	// (3.6.4); empty when it carries none.
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// BuiltAt is the build's fixed time (SOURCE_DATE_EPOCH) in the form
	// BuiltAtLayout; it also dates the archive's members.
	BuiltAt string `json:"builtAt"`
	// Parts are the parts, in the archive's order. Write fills them in.
	Parts []PartInfo `json:"parts"`
}

// PartInfo is what the manifest records of a part.
type PartInfo struct {
	// Name is the part's member name in the archive (rootfs.squashfs).
	Name string `json:"name"`
	// Role says where the part goes.
	Role Role `json:"role"`
	// Size is the part's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lowercase hex SHA-256 of the part's bytes.
	SHA256 string `json:"sha256"`
}

var (
	compatibleRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	partNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,99}$`)
)

// Part returns the manifest's part of that name.
func (m *Manifest) Part(name string) (PartInfo, bool) {
	for _, p := range m.Parts {
		if p.Name == name {
			return p, true
		}
	}
	return PartInfo{}, false
}

// PartByRole returns the manifest's part of role r.
func (m *Manifest) PartByRole(r Role) (PartInfo, bool) {
	for _, p := range m.Parts {
		if p.Role == r {
			return p, true
		}
	}
	return PartInfo{}, false
}

// BuildTime returns BuiltAt as a time.
func (m *Manifest) BuildTime() (time.Time, error) {
	t, err := time.Parse(BuiltAtLayout, m.BuiltAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("builtAt %q is not a time like 2026-01-01T00:00:00Z", m.BuiltAt)
	}
	return t, nil
}

// Validate checks the manifest and returns every problem it finds, joined
// into one error, or nil.
func (m *Manifest) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if m.FormatVersion != FormatVersion {
		add("formatVersion is %d; this package reads %d", m.FormatVersion, FormatVersion)
	}
	if _, err := parseVersion(m.Version); err != nil {
		add("version: %v", err)
	}
	if !compatibleRE.MatchString(m.Compatible) {
		add("compatible %q is not an image name (lowercase letters, digits, '.', '_', '-'; at most 63)", m.Compatible)
	}
	if _, err := parseVersion(m.MinFromVersion); err != nil {
		add("minFromVersion: %v", err)
	} else if c, err := CompareVersions(m.MinFromVersion, m.Version); err == nil && c > 0 {
		add("minFromVersion %s is newer than version %s", m.MinFromVersion, m.Version)
	}
	for _, f := range []struct{ name, v string }{{"kubernetesVersion", m.KubernetesVersion}, {"etcdVersion", m.EtcdVersion}} {
		if _, err := parseVersion(f.v); f.v != "" && err != nil {
			add("%s: %v", f.name, err)
		}
	}
	if t, err := m.BuildTime(); err != nil {
		add("%v", err)
	} else if t.Unix() < 0 || t.Unix() > maxTarTime {
		add("builtAt %s is out of the range an archive can date", m.BuiltAt)
	}
	problems = append(problems, m.validateParts()...)
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

// maxTarTime is the latest modification time a ustar header records.
const maxTarTime = 1<<33 - 1

// validateParts checks the parts: valid, distinct names; one part of each
// role; sizes and hashes in range and form.
func (m *Manifest) validateParts() []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(m.Parts) > maxParts {
		return []string{fmt.Sprintf("%d parts; an upgrade file has %d to %d", len(m.Parts), len(Roles()), len(Roles())+len(OptionalRoles()))}
	}
	names := map[string]bool{}
	roles := map[Role]int{}
	for i, p := range m.Parts {
		switch {
		case !partNameRE.MatchString(p.Name) || p.Name == ManifestName || p.Name == SignatureName:
			add("parts[%d]: name %q is not a part name (lowercase letters, digits, '.', '_', '-'; at most 100)", i, p.Name)
		case names[p.Name]:
			add("parts[%d]: name %q is used twice", i, p.Name)
		}
		names[p.Name] = true
		roles[p.Role]++
		if p.Size <= 0 || p.Size > MaxPartSize {
			add("parts[%d] %q: size %d is not between 1 and %d", i, p.Name, p.Size, int64(MaxPartSize))
		}
		if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != 32 || strings.ToLower(p.SHA256) != p.SHA256 {
			add("parts[%d] %q: sha256 %q is not 64 lowercase hex digits", i, p.Name, p.SHA256)
		}
	}
	for r, n := range roles {
		if !isRole(r) {
			add("role %q is not one of %v", r, append(Roles(), OptionalRoles()...))
		} else if n > 1 {
			add("%d parts have role %s; an upgrade file has one", n, r)
		}
	}
	for _, r := range Roles() {
		if roles[r] == 0 {
			add("no part has role %s", r)
		}
	}
	if (roles[RoleUKIA] == 0) != (roles[RoleUKIB] == 0) {
		add("a part has role %s or %s but not both: a Secure Boot upgrade carries both slots' unified kernel images", RoleUKIA, RoleUKIB)
	}
	return problems
}

func isRole(r Role) bool {
	for _, x := range append(Roles(), OptionalRoles()...) {
		if r == x {
			return true
		}
	}
	return false
}

// Marshal returns manifest.json: indented JSON and a newline, the only
// form ParseManifest accepts.
func (m *Manifest) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode upgrade manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// ParseManifest parses and validates manifest.json. It accepts exactly
// the bytes Marshal writes for a valid manifest: no unknown or repeated
// fields, no other spacing or order, nothing after it. Its errors say what
// is wrong, without naming the file.
func ParseManifest(data []byte) (Manifest, error) {
	if len(data) > MaxManifestSize {
		return Manifest{}, fmt.Errorf("%d bytes, more than the %d a manifest may have", len(data), MaxManifestSize)
	}
	var head struct {
		FormatVersion *int `json:"formatVersion"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Manifest{}, fmt.Errorf("does not parse as JSON: %w", err)
	}
	if head.FormatVersion == nil {
		return Manifest{}, errors.New("no formatVersion")
	}
	if *head.FormatVersion != FormatVersion {
		return Manifest{}, fmt.Errorf("formatVersion %d; this program reads %d: %w", *head.FormatVersion, FormatVersion, ErrUnsupportedFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("decode: %w", err)
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	canonical, err := m.Marshal()
	if err != nil {
		return Manifest{}, err
	}
	if !bytes.Equal(canonical, data) {
		return Manifest{}, errors.New("not in the form imagebuild writes (repeated fields, other spacing or key case, or data after it)")
	}
	return m, nil
}
