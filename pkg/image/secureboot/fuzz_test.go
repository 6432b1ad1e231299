package secureboot

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus under testdata/fuzz")

// FuzzParseAuthenticatedVariable feeds .auth files to
// ParseAuthenticatedVariable and Verify: only ErrMalformed from the parser
// and ErrMalformed or ErrBadSignature from Verify; what it accepts is
// written back byte for byte; and what verifies against the key the
// target signs a seed with carries that seed's timestamp and data.
func FuzzParseAuthenticatedVariable(f *testing.F) {
	ks, err := Generate(filepath.Join(f.TempDir(), "keys"), testSite, WithTime(testTime()))
	require.NoError(f, err)
	v := VariableOf(DB)
	signed, err := SignVariable(v, NewEFITime(testTime()), []byte("the data"), &ks.KEK)
	require.NoError(f, err)
	seed, err := signed.MarshalBinary()
	require.NoError(f, err)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAuthenticatedVariable(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		again, err := a.MarshalBinary()
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("what was read writes back different (%v)", err)
		}
		err = a.Verify(v, ks.KEK.Cert)
		switch {
		case err == nil:
			if a.Timestamp != signed.Timestamp || !bytes.Equal(a.Data, signed.Data) {
				t.Fatal("an update the key did not sign verifies")
			}
		case !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadSignature):
			t.Fatalf("Verify: unexpected error: %v", err)
		}
	})
}

// FuzzReadUKI feeds PE images to ReadUKI: only ErrMalformed; what it
// accepts has a .linux section, and every section it returns lies in the
// file.
func FuzzReadUKI(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		secs, err := ReadUKI(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if _, ok := secs[SectionLinux]; !ok {
			t.Fatal("accepted without .linux")
		}
		for name, b := range secs {
			if len(b) > len(data) || !bytes.Contains(data, b) {
				t.Fatalf("section %s is not in the file", name)
			}
		}
	})
}

// fuzzSeeds are the committed seeds of each target, by file name.
func fuzzSeeds(t *testing.T) map[string]map[string][]byte {
	ks := newTestKeySet(t)
	files, err := ks.Enrollment(testTime())
	require.NoError(t, err)

	in := newUKIInputs(t, writeFile(t, t.TempDir(), "stub", syntheticStub(0, 0x200)), 300, 40)
	in.u.OSRelease = "ID=terrarium\n"
	uki := filepath.Join(t.TempDir(), "uki.efi")
	require.NoError(t, WriteUKI(in.u, uki))
	ukiBytes, err := os.ReadFile(uki)
	require.NoError(t, err)
	return map[string]map[string][]byte{
		"FuzzParseAuthenticatedVariable": {
			"pk": files[AuthFile(PK)], "db": files[AuthFile(DB)],
			"delete": bytes.Clone(files[AuthFile(KEK)][:len(files[AuthFile(KEK)])-len(files[ESLFile(KEK)])]),
		},
		"FuzzReadUKI": {"uki": ukiBytes, "stub": syntheticStub(0x14df90000, 0x1000)},
	}
}

// TestFuzzSeeds checks that every target has its committed seeds; with
// -update it writes them anew.
func TestFuzzSeeds(t *testing.T) {
	for target, seeds := range fuzzSeeds(t) {
		dir := filepath.Join("testdata", "fuzz", target)
		if *update {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			for name, b := range seeds {
				data := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
				require.NoError(t, os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(data), 0o644))
			}
		}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err, "the seed corpus of %s: go test -run TestFuzzSeeds -update writes it", target)
		assert.GreaterOrEqual(t, len(entries), len(seeds), target)
	}
}
