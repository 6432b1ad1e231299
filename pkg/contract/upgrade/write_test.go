package upgrade_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func TestWriteRefuses(t *testing.T) {
	parts := writeParts(t, sampleParts())
	opened := 0
	counting := func(p upgrade.Part) upgrade.Part {
		open := p.Open
		p.Open = func() (io.ReadCloser, error) { opened++; return open() }
		return p
	}
	tests := []struct {
		name   string
		edit   func(m *upgrade.Manifest, parts []upgrade.Part) []upgrade.Part
		errMsg string
	}{
		{"parts in the manifest", func(m *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			m.Parts = []upgrade.PartInfo{{Name: "x"}}
			return ps
		}, "the manifest lists parts"},
		{"no version", func(m *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part { m.Version = ""; return ps }, "version: empty"},
		{"minFromVersion after version", func(m *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			m.MinFromVersion = "0.3.0"
			return ps
		}, "minFromVersion 0.3.0 is newer than version 0.2.0"},
		{"bad compatible", func(m *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part { m.Compatible = "Terrarium"; return ps }, `compatible "Terrarium"`},
		{"bad builtAt", func(m *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part { m.BuiltAt = "2026-01-01"; return ps }, `builtAt "2026-01-01"`},
		{"other format", func(m *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part { m.FormatVersion = 2; return ps }, "formatVersion is 2"},
		{"no kernel", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part { return []upgrade.Part{ps[0], ps[2]} }, "no part has role kernel"},
		{"two kernels", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			k := ps[1]
			k.Name = "vmlinuz.2"
			return append(ps, k)
		}, "2 parts have role kernel"},
		{"unknown role", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			ps[2].Role = "bootloader"
			return ps
		}, `role "bootloader" is not one of`},
		{"two SBOMs", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			s := upgrade.Part{Name: "sbom.cdx.json", Role: upgrade.RoleSBOM, Open: ps[2].Open}
			t := s
			t.Name = "sbom2.cdx.json"
			return append(ps, s, t)
		}, "2 parts have role sbom"},
		{"one slot's UKI", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			return append(ps, upgrade.Part{Name: "terrarium-a.efi", Role: upgrade.RoleUKIA, Open: ps[2].Open})
		}, "uki-a or uki-b but not both"},
		{"path in a name", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			ps[0].Name = "../rootfs"
			return ps
		}, `name "../rootfs" is not a part name`},
		{"name of the manifest", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			ps[0].Name = upgrade.ManifestName
			return ps
		}, `name "manifest.json" is not a part name`},
		{"a name twice", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			ps[1].Name = ps[0].Name
			return ps
		}, `name "rootfs.squashfs" is used twice`},
		{"no source", func(_ *upgrade.Manifest, ps []upgrade.Part) []upgrade.Part {
			ps[1].Open = nil
			return ps
		}, `part "vmlinuz" has no source`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opened = 0
			m := sampleManifest()
			var ps []upgrade.Part
			for _, p := range parts {
				ps = append(ps, counting(p))
			}
			ps = tt.edit(&m, ps)
			var buf bytes.Buffer
			_, err := upgrade.Write(context.Background(), &buf, m, ps, fixedKey(1))
			require.ErrorContains(t, err, tt.errMsg)
			assert.Zero(t, opened, "a part was read before the manifest was checked")
			assert.Zero(t, buf.Len(), "something was written")
		})
	}
}

func TestWritePartChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rootfs.squashfs")
	require.NoError(t, os.WriteFile(path, []byte("first"), 0o644))
	parts := writeParts(t, sampleParts())
	reads := 0
	parts[0].Open = func() (io.ReadCloser, error) {
		reads++
		if reads == 2 { // between the hashing and the copy
			require.NoError(t, os.WriteFile(path, []byte("other"), 0o644))
		}
		return os.Open(path)
	}
	_, err := upgrade.Write(context.Background(), io.Discard, sampleManifest(), parts, fixedKey(1))
	require.ErrorContains(t, err, "part rootfs.squashfs changed after it was hashed")

	reads = 0
	parts[0].Open = func() (io.ReadCloser, error) {
		reads++
		if reads == 2 {
			require.NoError(t, os.WriteFile(path, []byte("longer"), 0o644))
		}
		return os.Open(path)
	}
	_, err = upgrade.Write(context.Background(), io.Discard, sampleManifest(), parts, fixedKey(1))
	require.ErrorContains(t, err, "part rootfs.squashfs grew after it was hashed")
}

func TestWriteErrors(t *testing.T) {
	parts := writeParts(t, sampleParts())
	missing := upgrade.FilePart("vmlinuz", upgrade.RoleKernel, filepath.Join(t.TempDir(), "nope"))
	_, err := upgrade.Write(context.Background(), io.Discard, sampleManifest(), []upgrade.Part{parts[0], missing, parts[2]}, fixedKey(1))
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "write upgrade file: part vmlinuz: open ")

	_, err = upgrade.Write(context.Background(), io.Discard, sampleManifest(), parts, nil)
	require.ErrorContains(t, err, "the key is 0 bytes")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = upgrade.Write(ctx, io.Discard, sampleManifest(), parts, fixedKey(1))
	require.ErrorIs(t, err, context.Canceled)

	broken := errors.New("disk full")
	_, err = upgrade.Write(context.Background(), failingWriter{broken}, sampleManifest(), parts, fixedKey(1))
	require.ErrorIs(t, err, broken)
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestWriteOptionalVersions(t *testing.T) {
	m := sampleManifest()
	m.KubernetesVersion, m.EtcdVersion = "", ""
	var buf bytes.Buffer
	written, err := upgrade.Write(context.Background(), &buf, m, writeParts(t, sampleParts()), fixedKey(1))
	require.NoError(t, err)
	assert.NotContains(t, buf.String(), "kubernetesVersion")
	v, err := verify(buf.Bytes(), fixedKey(1))
	require.NoError(t, err)
	assert.Equal(t, written, v.Manifest())
}
