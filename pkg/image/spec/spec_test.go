package spec

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with the golden file at path, or rewrites the file
// when the -update flag is set.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("output differs from %s (run go test with -update to accept it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const fullSpec = `apiVersion: terrarium.dev/v1alpha1
kind: BuildSpec
name: appliance
version: 1.2.3
sourceDateEpoch: 1700000000
os:
  suite: trixie
  mirror: https://mirror.example/debian
  packages:
    - systemd
    - linux-image-amd64
    - systemd-boot-efi
    - grub-pc-bin
    - busybox-static
    - e2fsprogs
    - openssh-server
  overlay: overlay
  enable: [ssh.service]
kernel:
  cmdline: [console=ttyS0, quiet]
  modules: [virtio_blk]
boot:
  tries: 5
  timeoutSeconds: 2
  default: b
disk:
  espSizeMiB: 128
  slotSizeMiB: 512
slotB:
  mode: copy
  faults: [health]
outputs: [qcow2]
`

const minimalSpec = `apiVersion: terrarium.dev/v1alpha1
kind: BuildSpec
name: minimal
version: 0.0.1
os:
  suite: trixie
  packages: [systemd, linux-image-amd64, systemd-boot-efi, grub-pc-bin, busybox-static, e2fsprogs]
`

func TestParseValid(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "overlay"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, dir, "spec.yaml", fullSpec)

	s, err := Parse(path)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Spec{
		APIVersion:      APIVersion,
		Kind:            Kind,
		Name:            "appliance",
		Version:         "1.2.3",
		SourceDateEpoch: 1700000000,
		OS: OS{
			Suite:    "trixie",
			Mirror:   "https://mirror.example/debian",
			Packages: []string{"systemd", "linux-image-amd64", "systemd-boot-efi", "grub-pc-bin", "busybox-static", "e2fsprogs", "openssh-server"},
			Overlay:  "overlay",
			Enable:   []string{"ssh.service"},
		},
		Kernel:  Kernel{Cmdline: []string{"console=ttyS0", "quiet"}, Modules: []string{"virtio_blk"}},
		Boot:    Boot{Tries: 5, TimeoutSeconds: 2, Default: "b"},
		Disk:    Disk{ESPSizeMiB: 128, SlotSizeMiB: 512},
		SlotB:   SlotB{Mode: SlotCopy, Faults: []string{"health"}},
		Outputs: []string{OutputQCOW2},
		dir:     dir,
	}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", *s, want)
	}
	if s.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", s.Dir(), dir)
	}
	if got := s.Resolve(s.OS.Overlay); got != filepath.Join(dir, "overlay") {
		t.Errorf("Resolve(overlay) = %q, want %q", got, filepath.Join(dir, "overlay"))
	}
	if got := s.Resolve("/abs/path"); got != "/abs/path" {
		t.Errorf("Resolve(/abs/path) = %q, want it unchanged", got)
	}
	if got := s.Resolve(""); got != "" {
		t.Errorf("Resolve(\"\") = %q, want empty", got)
	}
	if !s.WantsOutput(OutputQCOW2) || s.WantsOutput(OutputRaw) {
		t.Errorf("WantsOutput: qcow2=%v raw=%v, want true/false", s.WantsOutput(OutputQCOW2), s.WantsOutput(OutputRaw))
	}
}

func TestParseRelativePathResolvesAgainstSpecDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "overlay"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "spec.yaml", fullSpec)
	t.Chdir(dir)
	s, err := Parse("spec.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !filepath.IsAbs(s.Dir()) {
		t.Errorf("Dir() = %q, want an absolute path", s.Dir())
	}
	if got, want := s.Resolve("overlay"), filepath.Join(dir, "overlay"); got != want {
		t.Errorf("Resolve(overlay) = %q, want %q", got, want)
	}
}

func TestParseDefaults(t *testing.T) {
	path := writeFile(t, t.TempDir(), "spec.yaml", minimalSpec)
	s, err := Parse(path)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"os.mirror", s.OS.Mirror, "http://deb.debian.org/debian"},
		{"boot.tries", s.Boot.Tries, 3},
		{"boot.default", s.Boot.Default, "a"},
		{"boot.timeoutSeconds", s.Boot.TimeoutSeconds, 0},
		{"disk.espSizeMiB", s.Disk.ESPSizeMiB, int64(256)},
		{"disk.slotSizeMiB", s.Disk.SlotSizeMiB, int64(1536)},
		{"slotB.mode", s.SlotB.Mode, SlotEmpty},
		{"outputs", s.Outputs, []string{OutputRaw, OutputQCOW2}},
		{"sourceDateEpoch", s.SourceDateEpoch, int64(1767225600)},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
			}
		})
	}
	if !s.WantsOutput(OutputRaw) || !s.WantsOutput(OutputQCOW2) || s.WantsOutput("vmdk") {
		t.Errorf("WantsOutput with default outputs: raw=%v qcow2=%v vmdk=%v", s.WantsOutput(OutputRaw), s.WantsOutput(OutputQCOW2), s.WantsOutput("vmdk"))
	}
}

// TestParseRepoSpec keeps the spec the project ships parseable.
func TestParseRepoSpec(t *testing.T) {
	s, err := Parse(filepath.Join("..", "..", "..", "os", "terrarium.yaml"))
	if err != nil {
		t.Fatalf("Parse(os/terrarium.yaml): %v", err)
	}
	if s.Name != "terrarium" || s.Boot.Tries != 3 {
		t.Errorf("os/terrarium.yaml: name %q tries %d, want terrarium and 3", s.Name, s.Boot.Tries)
	}
}

func TestParseInvalid(t *testing.T) {
	// Each case is testdata/invalid/<name>.yaml; its error text is in
	// <name>.golden. paths lists the $.paths the error must name.
	tests := []struct {
		name  string
		paths []string
	}{
		{"unknown-field", []string{"$.favourite"}},
		{"bad-api-version", []string{"$.apiVersion"}},
		{"missing-required-packages", []string{"$.os.packages"}},
		{"no-packages", []string{"$.os.packages"}},
		{"default-b-slot-b-empty", []string{"$.boot.default"}},
		{"unknown-output", []string{"$.outputs[1]"}},
		{"bad-fault", []string{"$.slotB.faults[1]"}},
		{"bad-components", []string{"$.components[0].component", "$.components[1].programs", "$.components[1].dir"}},
		{"bad-vsphere", []string{"$.outputs[2]", "$.vsphere.hardwareVersion"}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		seen[tt.name+".yaml"] = true
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join("testdata", "invalid", tt.name+".yaml")
			s, err := Parse(path)
			if err == nil {
				t.Fatalf("Parse(%s) = %+v, want an error", path, s)
			}
			if s != nil {
				t.Errorf("Parse returned a spec along with the error: %+v", s)
			}
			var problems strictyaml.Problems
			if !errors.As(err, &problems) {
				t.Fatalf("error %T does not unwrap to strictyaml.Problems: %v", err, err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, path+": $") {
					t.Errorf("error line %q does not start with %q", line, path+": $")
				}
			}
			for _, want := range tt.paths {
				found := false
				for _, p := range problems {
					if p.Path == want {
						found = true
					}
				}
				if !found {
					t.Errorf("no problem at %s; got:\n%v", want, err)
				}
			}
			golden(t, filepath.Join("testdata", "invalid", tt.name+".golden"), []byte(err.Error()+"\n"))
		})
	}
	// Every invalid spec in testdata must be exercised.
	files, err := filepath.Glob(filepath.Join("testdata", "invalid", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s has no test case", f)
		}
	}
}

func TestParseValidationProblems(t *testing.T) {
	// Mutations of minimalSpec, each naming the path of its one problem.
	tests := []struct {
		name     string
		from, to string
		path     string
		contains string
	}{
		{"bad kind", "kind: BuildSpec", "kind: Spec", "$.kind", `write "BuildSpec"`},
		{"bad name", "name: minimal", "name: Minimal!", "$.name", "not a valid image name"},
		{"no version", "version: 0.0.1\n", "", "$.version", "is required"},
		{"negative epoch", "version: 0.0.1\n", "version: 0.0.1\nsourceDateEpoch: -1\n", "$.sourceDateEpoch", "not negative"},
		{"no suite", "  suite: trixie\n", "", "$.os.suite", "is required"},
		{"bad mirror", "  suite: trixie\n", "  suite: trixie\n  mirror: ftp://example\n", "$.os.mirror", "not an http(s) URL"},
		{"duplicate package", "e2fsprogs]", "e2fsprogs, systemd]", "$.os.packages[6]", "listed twice"},
		{"bad package name", "e2fsprogs]", "e2fsprogs, Bad_Pkg]", "$.os.packages[6]", "not a Debian package name"},
		{"overlay missing", "  suite: trixie\n", "  suite: trixie\n  overlay: nope\n", "$.os.overlay", "not a directory"},
		{"tries too high", "os:", "boot:\n  tries: 10\nos:", "$.boot.tries", "use 1 to 9"},
		{"kernel argument GRUB reads", "os:", "kernel:\n  cmdline: [console=ttyS0, \"init=/bin/sh; reboot\"]\nos:", "$.kernel.cmdline[1]", "GRUB boots this image under BIOS"},
		{"negative timeout", "os:", "boot:\n  timeoutSeconds: -1\nos:", "$.boot.timeoutSeconds", "must not be negative"},
		{"default c", "os:", "boot:\n  default: c\nos:", "$.boot.default", `use "a" or "b"`},
		{"esp too small", "os:", "disk:\n  espSizeMiB: 32\nos:", "$.disk.espSizeMiB", "at least 64 MiB"},
		{"slot too small", "os:", "disk:\n  slotSizeMiB: 100\nos:", "$.disk.slotSizeMiB", "at least 256 MiB"},
		{"bad slot mode", "os:", "slotB:\n  mode: mirror\nos:", "$.slotB.mode", `use "empty" or "copy"`},
		{"faults need copy", "os:", "slotB:\n  faults: [health]\nos:", "$.slotB.faults", "needs slotB.mode: copy"},
		{"wrong type", "version: 0.0.1", "version: 0.0.1\nsourceDateEpoch: soon", "$.sourceDateEpoch", ""},
		{"unknown output", "os:", "outputs: [raw, vhd]\nos:", "$.outputs[1]", `unknown output "vhd" (supported: raw, qcow2, vmdk, ova, iso)`},
		{"lock a directory", "  suite: trixie\n", "  suite: trixie\n  lock: .\n", "$.os.lock", "is a directory"},
		{"component under /usr/local", "os:", "components: [{component: ., programs: [x], dir: /usr/local/bin}]\nos:", "$.components[0].dir", "a link into /var"},
		{"output twice", "os:", "outputs: [vmdk, vmdk]\nos:", "$.outputs[1]", "listed twice"},
		{"hardware version without ova", "os:", "outputs: [vmdk]\nvsphere:\n  hardwareVersion: 14\nos:", "$.vsphere.hardwareVersion", "lists no ova"},
		{"unknown hardware version", "os:", "outputs: [ova]\nvsphere:\n  hardwareVersion: 16\nos:", "$.vsphere.hardwareVersion", "unsupported virtual hardware version: 16; use one of 13 (ESXi 6.5)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(minimalSpec, tt.from) {
				t.Fatalf("test bug: %q not in minimalSpec", tt.from)
			}
			path := writeFile(t, t.TempDir(), "spec.yaml", strings.Replace(minimalSpec, tt.from, tt.to, 1))
			_, err := Parse(path)
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			var problems strictyaml.Problems
			if !errors.As(err, &problems) {
				t.Fatalf("error %T is not strictyaml.Problems: %v", err, err)
			}
			if len(problems) != 1 {
				t.Errorf("got %d problems, want 1:\n%v", len(problems), err)
			}
			if problems[0].Path != tt.path {
				t.Errorf("problem path %q, want %q (error: %v)", problems[0].Path, tt.path, err)
			}
			if !strings.Contains(problems[0].Message, tt.contains) {
				t.Errorf("problem message %q does not contain %q", problems[0].Message, tt.contains)
			}
			if !strings.HasPrefix(err.Error(), path+": "+tt.path+": ") {
				t.Errorf("error %q does not start with %q", err, path+": "+tt.path+": ")
			}
		})
	}
}

func TestParseMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Parse(path)
	if err == nil {
		t.Fatal("Parse of a missing file succeeded")
	}
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("error %v: want an ErrNotExist naming %s", err, path)
	}
}

func TestEpoch(t *testing.T) {
	tests := []struct {
		name string
		env  string
		spec int64
		want time.Time
	}{
		{"spec value", "", 1700000000, time.Unix(1700000000, 0)},
		{"env overrides", "1600000000", 1700000000, time.Unix(1600000000, 0)},
		{"env zero", "0", 1700000000, time.Unix(0, 0)},
		{"invalid env ignored", "yesterday", 1700000000, time.Unix(1700000000, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", tt.env)
			s := &Spec{SourceDateEpoch: tt.spec}
			got := s.Epoch()
			if !got.Equal(tt.want) {
				t.Errorf("Epoch() = %v, want %v", got, tt.want.UTC())
			}
			if got.Location() != time.UTC {
				t.Errorf("Epoch() location %v, want UTC", got.Location())
			}
		})
	}
}
