package upgrade_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// FuzzOpen feeds upgrade files (the seed corpus is in
// testdata/fuzz/FuzzOpen, written by TestFuzzCorpus -update) to Open and
// Verify: they never panic, refuse with the package's named errors, and a
// file they accept is exactly the one Write makes of its manifest and
// parts.
func FuzzOpen(f *testing.F) {
	key := fixedKey(1)
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := open(data)
		if err != nil {
			requireNamed(t, err, upgrade.ErrMalformed, upgrade.ErrTruncated, upgrade.ErrUnsupportedFormat, upgrade.ErrUnsigned)
			return
		}
		m := file.Manifest()
		if err := m.Validate(); err != nil {
			t.Fatalf("Open accepted an invalid manifest: %v", err)
		}
		trusted := []signature.PublicKey{signature.PublicKeyOf(key)}
		v, err := file.Verify(context.Background(), trusted)
		if err != nil {
			requireNamed(t, err, upgrade.ErrMalformed, upgrade.ErrUnknownKey, upgrade.ErrBadSignature, upgrade.ErrHashMismatch)
			return
		}
		var parts []upgrade.Part
		for _, p := range m.Parts {
			var b bytes.Buffer
			if err := v.CopyPart(context.Background(), &b, p.Name); err != nil {
				t.Fatalf("CopyPart %s of a verified file: %v", p.Name, err)
			}
			parts = append(parts, upgrade.Part{Name: p.Name, Role: p.Role, Open: func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(b.Bytes())), nil
			}})
		}
		// Assemble makes the same file of its signed manifest and parts.
		manifest, sig := v.SignedManifest()
		r, size, err := upgrade.Assemble(manifest, sig, func(p upgrade.PartInfo) (io.ReaderAt, error) {
			sr, _, err := v.Part(p.Name)
			return sr, err
		})
		if err != nil {
			t.Fatalf("Assemble of a verified file's manifest and parts: %v", err)
		}
		if got, err := io.ReadAll(io.NewSectionReader(r, 0, size)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Assemble made other bytes than the file's (%v)", err)
		}
		m.FormatVersion, m.Parts = 0, nil
		var again bytes.Buffer
		if _, err := upgrade.Write(context.Background(), &again, m, parts, key); err != nil {
			t.Fatalf("Write of a verified file's manifest and parts: %v", err)
		}
		if !bytes.Equal(again.Bytes(), data) {
			t.Fatalf("a verified file is not the one Write makes of its manifest and parts")
		}
	})
}

// requireNamed fails unless err is an *Error wrapping one of targets.
func requireNamed(t *testing.T, err error, targets ...error) {
	t.Helper()
	var e *upgrade.Error
	if !errors.As(err, &e) || e.File != "test.upgrade" {
		t.Fatalf("error %v is not an *upgrade.Error naming the file", err)
	}
	if !isOneOf(err, targets...) {
		t.Fatalf("error %v is none of %v", err, targets)
	}
}

// TestFuzzCorpus keeps the seed corpus of FuzzOpen in step with the
// format; go test -run TestFuzzCorpus -update rewrites it.
func TestFuzzCorpus(t *testing.T) {
	good := build(t, fixedKey(1))
	ms := members(t, good)
	manifest, sig, rootfs, kernel, initrd := ms[0], ms[1], ms[2], ms[3], ms[4]
	seeds := map[string][]byte{
		"valid":           good,
		"unknown-key":     build(t, fixedKey(2)),
		"empty":           {},
		"truncated":       good[:len(good)/2],
		"unsigned":        archive(t, manifest, rootfs, kernel, initrd),
		"extra-member":    archive(t, manifest, sig, rootfs, kernel, initrd, member{"extra", []byte("x")}),
		"duplicate-part":  archive(t, manifest, sig, rootfs, rootfs, kernel, initrd),
		"reordered":       archive(t, manifest, sig, kernel, rootfs, initrd),
		"manifest-only":   archive(t, manifest),
		"newer-format":    archive(t, member{upgrade.ManifestName, []byte(`{"formatVersion": 2}`)}),
		"trailing-data":   append(bytes.Clone(good), 1),
		"flipped-in-part": flipAt(good, bytes.Index(good, rootfs.data)+7),
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	for name, data := range seeds {
		path := filepath.Join(dir, name)
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if *update {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "run go test -run TestFuzzCorpus -update")
		require.Equal(t, want, string(got), "%s is stale: run go test -run TestFuzzCorpus -update", path)
	}
}

func flipAt(data []byte, i int) []byte {
	out := bytes.Clone(data)
	out[i] ^= 0x80
	return out
}
