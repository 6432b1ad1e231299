// Package spec holds imagebuild's build spec: declarative, versioned YAML
// that says what goes into an image. Parse reads and validates it; defaults
// are filled in one place (setDefaults); Default hands out a fresh copy of
// the built-in spec.
package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
	"github.com/terrarium-os/terrarium/pkg/image/biosboot"
	"github.com/terrarium-os/terrarium/pkg/image/ova"
)

// APIVersion and Kind identify a build spec document.
const (
	APIVersion = "terrarium.dev/v1alpha1"
	Kind       = "BuildSpec"
)

// Output formats.
const (
	OutputRaw   = "raw"
	OutputQCOW2 = "qcow2"
	// OutputVMDK is a streamOptimized VMDK (pkg/image/vmdk).
	OutputVMDK = "vmdk"
	// OutputOVA is an OVA for vSphere (pkg/image/ova), which carries the
	// VMDK.
	OutputOVA = "ova"
	// OutputISO is the hybrid ISO (pkg/image/iso): optical drives and USB
	// sticks, UEFI, live from the medium.
	OutputISO = "iso"
)

// outputs lists the output formats, in the order messages name them.
func outputs() []string {
	return []string{OutputRaw, OutputQCOW2, OutputVMDK, OutputOVA, OutputISO}
}

// Slot B modes.
const (
	// SlotEmpty leaves slot B empty (it is filled by the first upgrade).
	SlotEmpty = "empty"
	// SlotCopy puts the same build in slot B, with its own release faults;
	// used to test fallback.
	SlotCopy = "copy"
)

// Spec is a build spec.
type Spec struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// Extends names a build spec this one starts from, relative to this
	// file: every top-level section this spec sets (name, os, bundles,
	// outputs, ...) replaces the base's whole section, and the rest is
	// the base's, its paths still relative to the base's file. The base
	// must be a valid spec on its own and extend nothing itself. Parse
	// returns the merged spec, which extends nothing. The
	// tests' image (qemu-tests/testdata/terrarium-test.yaml) is the
	// default image with their applications' bundle added this way.
	Extends string `yaml:"extends,omitempty"`
	// Name of the image; names the output files.
	Name string `yaml:"name"`
	// Version of the image, recorded in release.json and the manifest.
	Version string `yaml:"version"`
	// SourceDateEpoch fixes every timestamp in the outputs. The
	// SOURCE_DATE_EPOCH environment variable overrides it.
	SourceDateEpoch int64  `yaml:"sourceDateEpoch,omitempty"`
	OS              OS     `yaml:"os"`
	Kernel          Kernel `yaml:"kernel,omitempty"`
	Boot            Boot   `yaml:"boot,omitempty"`
	Disk            Disk   `yaml:"disk,omitempty"`
	SlotB           SlotB  `yaml:"slotB,omitempty"`
	// Faults are defects injected into the build's own release (slot A
	// and its upgrade file): a deliberately broken build, for tests of
	// upgrades that must roll back. "health" makes its health check fail.
	Faults []string `yaml:"faults,omitempty"`
	// Bundles are bundle files whose images the slot carries as one OCI
	// layout, served by the node's registry.
	Bundles []string `yaml:"bundles,omitempty"`
	// Components are programs built from pinned Go sources and installed
	// into the slot (node binaries such as kubelet and containerd).
	Components []Component `yaml:"components,omitempty"`
	Outputs    []string    `yaml:"outputs,omitempty"`
	// VSphere holds the ova output's settings.
	VSphere VSphere `yaml:"vsphere,omitempty"`
	// Upgrade holds the upgrade file's settings and the keys the image
	// trusts for upgrade files.
	Upgrade Upgrade `yaml:"upgrade,omitempty"`
	// SecureBoot signs the boot chain with the site's own keys.
	SecureBoot SecureBoot `yaml:"secureBoot,omitempty"`

	// dir is the directory relative paths are resolved against.
	dir string
}

// Component installs programs of a component (a nested Go module under
// components/, see pkg/image/gobuild) into the slot.
type Component struct {
	// Component is the component's directory, relative to the spec file.
	Component string `yaml:"component"`
	// Programs to build and install.
	Programs []string `yaml:"programs"`
	// Dir is where they go in the slot: an absolute path under /usr, the
	// part of the image that upgrades replace.
	Dir string `yaml:"dir"`
}

// OS is the root filesystem's content.
type OS struct {
	Suite  string `yaml:"suite"`
	Mirror string `yaml:"mirror,omitempty"`
	// Packages installed on top of mmdebstrap's minbase variant.
	Packages []string `yaml:"packages"`
	// Overlay is a directory copied over the root filesystem.
	Overlay string `yaml:"overlay,omitempty"`
	// Lock is the OS lock file (relative to the spec): the exact .deb
	// files of the packages, written by `imagebuild os lock` (make pin).
	// Without one, the packages are resolved in the archive on the day of
	// the build.
	Lock string `yaml:"lock,omitempty"`
	// Enable lists systemd units enabled in the image.
	Enable []string `yaml:"enable,omitempty"`
}

// Kernel settings.
type Kernel struct {
	// Cmdline holds the kernel arguments; terrarium.slot is added per slot.
	Cmdline []string `yaml:"cmdline,omitempty"`
	// Modules loaded by the initramfs (with their dependencies).
	Modules []string `yaml:"modules,omitempty"`
}

// Boot holds boot loader settings.
type Boot struct {
	// Tries is the boot counter of a new slot's entry: how many boots may
	// fail their health check before systemd-boot falls back.
	Tries int `yaml:"tries,omitempty"`
	// TimeoutSeconds of the systemd-boot menu (0: no menu).
	TimeoutSeconds int `yaml:"timeoutSeconds,omitempty"`
	// Default is the slot booted first ("a" or "b").
	Default string `yaml:"default,omitempty"`
}

// Disk sizes.
type Disk struct {
	ESPSizeMiB  int64 `yaml:"espSizeMiB,omitempty"`
	SlotSizeMiB int64 `yaml:"slotSizeMiB,omitempty"`
}

// SlotB says what slot B holds.
type SlotB struct {
	Mode string `yaml:"mode,omitempty"`
	// Faults injected into slot B's release (copy mode only), e.g.
	// "health" makes its health check fail: a deliberately broken build.
	Faults []string `yaml:"faults,omitempty"`
}

// VSphere holds the settings of the ova output.
type VSphere struct {
	// HardwareVersion is the VM's virtual hardware version (vmx-NN): the
	// oldest ESXi release that can run it. Defaults to
	// ova.DefaultHardwareVersion when the ova output is requested.
	HardwareVersion int `yaml:"hardwareVersion,omitempty"`
}

// Parse reads a build spec file: with extends, the spec it names with
// this one's sections in place of the base's (see Extends).
func Parse(path string) (*Spec, error) {
	s, data, err := load(path)
	if err != nil {
		return nil, err
	}
	if s.Extends != "" {
		if s, err = s.extend(data); err != nil {
			return nil, fileError(path, err)
		}
	}
	s.setDefaults()
	if err := s.Validate(); err != nil {
		if p, ok := errors.AsType[strictyaml.Problems](err); ok {
			err = p.WithLines(data)
		}
		return nil, fileError(path, err)
	}
	return s, nil
}

// load reads and decodes a build spec file, without defaults or
// validation.
func load(path string) (*Spec, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read build spec: %w", err)
	}
	var s Spec
	if err := strictyaml.Unmarshal(data, &s); err != nil {
		return nil, nil, fileError(path, err)
	}
	abs, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, nil, fmt.Errorf("build spec %s: %w", path, err)
	}
	s.dir = abs
	return &s, data, nil
}

// fileError names path in err. Only this file's own problems are err
// itself; problems err wraps (an extended spec's) name their file already.
func fileError(path string, err error) error {
	if p, ok := err.(strictyaml.Problems); ok { //nolint:errorlint // err itself, see above
		return p.WithFile(path)
	}
	return fmt.Errorf("build spec %s: %w", path, err)
}

// Dir is the directory the spec's relative paths are resolved against.
func (s *Spec) Dir() string { return s.dir }

// Resolve makes a spec-relative path absolute.
func (s *Spec) Resolve(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.dir, p)
}

// Epoch is the timestamp every output carries.
func (s *Spec) Epoch() time.Time {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Unix(s.SourceDateEpoch, 0).UTC()
}

// WantsOutput reports whether the spec asks for output format f.
func (s *Spec) WantsOutput(f string) bool {
	for _, o := range s.Outputs {
		if o == f {
			return true
		}
	}
	return false
}

func (s *Spec) setDefaults() {
	if s.OS.Mirror == "" {
		s.OS.Mirror = "http://deb.debian.org/debian"
	}
	if s.Boot.Tries == 0 {
		s.Boot.Tries = 3
	}
	if s.Boot.Default == "" {
		s.Boot.Default = "a"
	}
	if s.Disk.ESPSizeMiB == 0 {
		s.Disk.ESPSizeMiB = 256
	}
	if s.Disk.SlotSizeMiB == 0 {
		s.Disk.SlotSizeMiB = 1536
	}
	if s.SlotB.Mode == "" {
		s.SlotB.Mode = SlotEmpty
	}
	if len(s.Outputs) == 0 {
		s.Outputs = []string{OutputRaw, OutputQCOW2}
	}
	if s.SourceDateEpoch == 0 {
		s.SourceDateEpoch = 1767225600 // 2026-01-01T00:00:00Z
	}
	if s.SecureBoot.Keys != "" && s.SecureBoot.Enroll == "" {
		s.SecureBoot.Enroll = EnrollIfSafe
	}
	if s.WantsOutput(OutputOVA) && s.VSphere.HardwareVersion == 0 {
		s.VSphere.HardwareVersion = ova.DefaultHardwareVersion
	}
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
)

// Validate collects every problem of the spec, each with its path.
func (s *Spec) Validate() error {
	var p strictyaml.Problems
	root := strictyaml.Root()
	if s.APIVersion != APIVersion {
		p.Addf(root.Field("apiVersion"), "is %q; this imagebuild reads %q", s.APIVersion, APIVersion)
	}
	if s.Kind != Kind {
		p.Addf(root.Field("kind"), "is %q; write %q", s.Kind, Kind)
	}
	if !nameRE.MatchString(s.Name) {
		p.Addf(root.Field("name"), "%q is not a valid image name (lowercase letters, digits, '.', '_', '-'; at most 63)", s.Name)
	}
	if s.Version == "" {
		p.Addf(root.Field("version"), "is required (e.g. 0.1.0)")
	}
	if s.SourceDateEpoch < 0 {
		p.Addf(root.Field("sourceDateEpoch"), "must be a Unix time in seconds, not negative")
	}
	s.validateOS(&p, root.Field("os"))
	for i, b := range s.Bundles {
		if fi, err := os.Stat(s.Resolve(b)); err != nil || fi.IsDir() {
			p.Addf(root.Field("bundles").Index(i), "%q is not a bundle file (paths are relative to the spec file)", b)
		}
	}
	for i, c := range s.Components {
		cp := root.Field("components").Index(i)
		if fi, err := os.Stat(s.Resolve(c.Component)); c.Component == "" || err != nil || !fi.IsDir() {
			p.Addf(cp.Field("component"), "%q is not a component directory (paths are relative to the spec file)", c.Component)
		}
		if len(c.Programs) == 0 {
			p.Addf(cp.Field("programs"), "is required (the component's programs to install)")
		}
		switch d := filepath.Clean(c.Dir); {
		case !strings.HasPrefix(d, "/usr/") || d != c.Dir:
			p.Addf(cp.Field("dir"), "%q must be a clean absolute path under /usr/ (the rest of the tree is state or configuration)", c.Dir)
		case d == "/usr/local" || strings.HasPrefix(d, "/usr/local/"):
			p.Addf(cp.Field("dir"), "%q is under /usr/local, a link into /var (writable state) on the appliance, which upgrades never replace; use /usr/bin or /usr/lib/<name>", c.Dir)
		}
	}
	s.validateBoot(&p, root)
	s.validateOutputs(&p, root)
	s.validateUpgrade(&p, root.Field("upgrade"))
	s.validateSecureBoot(&p, root)
	return p.Err()
}

func (s *Spec) validateOutputs(p *strictyaml.Problems, root strictyaml.Path) {
	seen := map[string]bool{}
	for i, o := range s.Outputs {
		switch {
		case !slices.Contains(outputs(), o):
			p.Addf(root.Field("outputs").Index(i), "unknown output %q (supported: %s)", o, strings.Join(outputs(), ", "))
		case seen[o]:
			p.Addf(root.Field("outputs").Index(i), "%q is listed twice", o)
		}
		seen[o] = true
	}
	hw := root.Field("vsphere").Field("hardwareVersion")
	switch {
	case !s.WantsOutput(OutputOVA):
		if s.VSphere.HardwareVersion != 0 {
			p.Addf(hw, "is set but outputs lists no ova, the only output that uses it")
		}
	case ova.CheckHardwareVersion(s.VSphere.HardwareVersion) != nil:
		p.Addf(hw, "%v", ova.CheckHardwareVersion(s.VSphere.HardwareVersion))
	}
}

func (s *Spec) validateOS(p *strictyaml.Problems, path strictyaml.Path) {
	if s.OS.Suite == "" {
		p.Addf(path.Field("suite"), "is required (e.g. trixie)")
	}
	if !strings.HasPrefix(s.OS.Mirror, "http://") && !strings.HasPrefix(s.OS.Mirror, "https://") {
		p.Addf(path.Field("mirror"), "%q is not an http(s) URL", s.OS.Mirror)
	}
	if len(s.OS.Packages) == 0 {
		p.Addf(path.Field("packages"), "lists no packages; at least systemd and linux-image-amd64 are needed")
	}
	seen := map[string]bool{}
	for i, pkg := range s.OS.Packages {
		switch {
		case !packageRE.MatchString(pkg):
			p.Addf(path.Field("packages").Index(i), "%q is not a Debian package name", pkg)
		case seen[pkg]:
			p.Addf(path.Field("packages").Index(i), "%q is listed twice", pkg)
		}
		seen[pkg] = true
	}
	for _, need := range []string{"systemd", "linux-image-amd64", "systemd-boot-efi", "grub-pc-bin", "busybox-static", "e2fsprogs"} {
		if !seen[need] {
			p.Addf(path.Field("packages"), "must include %q (the boot chain needs it)", need)
		}
	}
	if fi, err := os.Stat(s.Resolve(s.OS.Lock)); s.OS.Lock != "" && err == nil && fi.IsDir() {
		p.Addf(path.Field("lock"), "%q is a directory; name the lock file (`imagebuild os lock` writes it)", s.OS.Lock)
	}
	if s.OS.Overlay != "" {
		if fi, err := os.Stat(s.Resolve(s.OS.Overlay)); err != nil || !fi.IsDir() {
			p.Addf(path.Field("overlay"), "%q is not a directory (paths are relative to the spec file)", s.OS.Overlay)
		}
	}
}

func (s *Spec) validateBoot(p *strictyaml.Problems, root strictyaml.Path) {
	if s.Boot.Tries < 1 || s.Boot.Tries > layout.MaxBootTries {
		p.Addf(root.Field("boot").Field("tries"), "is %d; use 1 to %d", s.Boot.Tries, layout.MaxBootTries)
	}
	if !s.SecureBootOn() {
		// GRUB boots the image under BIOS with the same command line.
		for i, a := range s.Kernel.Cmdline {
			if err := biosboot.CheckKernelArg(a); err != nil {
				p.Addf(root.Field("kernel").Field("cmdline").Index(i), "%v: GRUB boots this image under BIOS and passes each argument as it is", err)
			}
		}
	}
	if s.Boot.TimeoutSeconds < 0 {
		p.Addf(root.Field("boot").Field("timeoutSeconds"), "must not be negative")
	}
	if s.Boot.Default != "a" && s.Boot.Default != "b" {
		p.Addf(root.Field("boot").Field("default"), "is %q; use \"a\" or \"b\"", s.Boot.Default)
	}
	if s.Boot.Default == "b" && s.SlotB.Mode == SlotEmpty {
		p.Addf(root.Field("boot").Field("default"), "is \"b\" but slot B is empty; set slotB.mode: copy")
	}
	if s.Disk.ESPSizeMiB < 64 {
		p.Addf(root.Field("disk").Field("espSizeMiB"), "is %d; the ESP needs at least 64 MiB for two kernels and initramfs images", s.Disk.ESPSizeMiB)
	}
	if s.Disk.SlotSizeMiB < 256 {
		p.Addf(root.Field("disk").Field("slotSizeMiB"), "is %d; a slot needs at least 256 MiB", s.Disk.SlotSizeMiB)
	}
	switch s.SlotB.Mode {
	case SlotEmpty:
		if len(s.SlotB.Faults) > 0 {
			p.Addf(root.Field("slotB").Field("faults"), "needs slotB.mode: copy (an empty slot has no release to break)")
		}
	case SlotCopy:
	default:
		p.Addf(root.Field("slotB").Field("mode"), "is %q; use %q or %q", s.SlotB.Mode, SlotEmpty, SlotCopy)
	}
	for i, f := range s.SlotB.Faults {
		if f != "health" {
			p.Addf(root.Field("slotB").Field("faults").Index(i), "unknown fault %q (supported: health)", f)
		}
	}
	for i, f := range s.Faults {
		if f != "health" {
			p.Addf(root.Field("faults").Index(i), "unknown fault %q (supported: health)", f)
		}
	}
}
