package build

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/diskimage"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/sbom"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// Manifest is manifest.json: what went into the image and what came out.
type Manifest struct {
	Name            string            `json:"name"`
	Version         string            `json:"version"`
	SourceDateEpoch int64             `json:"sourceDateEpoch"`
	Suite           string            `json:"suite"`
	Kernel          string            `json:"kernel"`
	BaseKey         string            `json:"rootfsBaseKey"`
	Packages        map[string]string `json:"packages"`
	Partitions      []PartitionInfo   `json:"partitions"`
	// Bundle lists every image the slot carries, with its digest.
	Bundle *bundle.Manifest `json:"bundle,omitempty"`
	// Components lists the programs built from pinned sources.
	Components []ComponentProgram `json:"components,omitempty"`
	// SecureBoot records a Secure Boot image's signer and UKIs.
	SecureBoot *SecureBootInfo   `json:"secureBoot,omitempty"`
	Outputs    map[string]Output `json:"outputs"`
}

// PartitionInfo records one partition of the image.
type PartitionInfo struct {
	Label    string `json:"label"`
	Type     string `json:"type"`
	GUID     string `json:"guid"`
	StartMiB int64  `json:"startMiB"`
	SizeMiB  int64  `json:"sizeMiB"`
}

// Output is one written file.
type Output struct {
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func newManifest(s *spec.Spec) *Manifest {
	return &Manifest{Name: s.Name, Version: s.Version, SourceDateEpoch: s.Epoch().Unix(), Suite: s.OS.Suite, Outputs: map[string]Output{}}
}

func (m *Manifest) addBase(b *rootfs.Base) error {
	pkgs, err := b.Versions()
	if err != nil {
		return err
	}
	m.Packages, m.BaseKey, m.Kernel = pkgs, b.Key, b.KernelVersion()
	return nil
}

func (m *Manifest) addPartitions(placed []diskimage.Placed) {
	for _, p := range placed {
		m.Partitions = append(m.Partitions, PartitionInfo{Label: p.Label, Type: p.Type, GUID: p.GUID, StartMiB: p.Start >> 20, SizeMiB: p.Size >> 20})
	}
}

func (m *Manifest) addOutput(format, path string) error {
	sum, size, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("hash output %s: %w", path, err)
	}
	m.Outputs[format] = Output{File: filepath.Base(path), Size: size, SHA256: sum}
	return nil
}

func (m *Manifest) write(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o644)
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, 4<<20))
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeSBOM writes the SBOM of what the manifest lists so far (the base's
// Debian packages, the components, the bundle's images) to path, whole or
// not at all, and returns how many components it lists.
func writeSBOM(path string, s *spec.Spec, m *Manifest) (int, error) {
	in := sbom.Inputs{Name: s.Name, Version: s.Version, Epoch: s.Epoch(), Suite: s.OS.Suite, Debian: m.Packages}
	for _, c := range m.Components {
		in.Programs = append(in.Programs, sbom.Program{Module: c.Module, Path: c.Path})
	}
	if m.Bundle != nil {
		for _, img := range m.Bundle.Images {
			in.Images = append(in.Images, sbom.Image{Name: img.Name, Digest: img.Digest})
		}
	}
	n := 0
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		var werr error
		n, werr = sbom.Write(w, in)
		return werr
	})
	return n, err
}
