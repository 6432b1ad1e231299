package fwcfg

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// fuzzEntry is one fw_cfg entry of FuzzFetch's sysfs tree. The tree is
// made once per worker and changed in place, through files kept open: an
// absent entry or size file is renamed aside, not removed, and a file is
// rewritten from its start and cut to length, never truncated to zero and
// closed (which makes ext4 write it out). Creating, removing and flushing
// files would be most of what a run costs.
type fuzzEntry struct {
	dir            string
	raw, size      *os.File
	present, sized bool
}

func newFuzzEntry(tb testing.TB, root, name string) *fuzzEntry {
	tb.Helper()
	e := &fuzzEntry{dir: filepath.Join(root, "by_name", filepath.FromSlash(name)), present: true, sized: true}
	require.NoError(tb, os.MkdirAll(e.dir, 0o755))
	var err error
	e.raw, err = os.Create(filepath.Join(e.dir, "raw"))
	require.NoError(tb, err)
	e.size, err = os.Create(filepath.Join(e.dir, "size"))
	require.NoError(tb, err)
	tb.Cleanup(func() {
		require.NoError(tb, e.raw.Close())
		require.NoError(tb, e.size.Close())
	})
	return e
}

// set gives the entry raw as its bytes and size as its size file, or
// takes it (or only its size file) away.
func (e *fuzzEntry) set(t *testing.T, present bool, raw []byte, sized bool, size []byte) {
	aside := func(p string) string { return filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".absent") }
	move := func(from, to string) { require.NoError(t, os.Rename(from, to)) }
	write := func(f *os.File, b []byte) {
		_, err := f.WriteAt(b, 0)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(int64(len(b))))
	}
	if !e.present {
		move(aside(e.dir), e.dir)
	}
	write(e.raw, raw)
	sizePath := filepath.Join(e.dir, "size")
	switch {
	case sized && !e.sized:
		move(aside(sizePath), sizePath)
	case !sized && e.sized:
		move(sizePath, aside(sizePath))
	}
	write(e.size, size)
	e.sized = sized
	if !present {
		move(e.dir, aside(e.dir))
	}
	e.present = present
}

// wantEntry is what reading an entry of raw bytes must give under limit:
// the size file, if any, must hold a count within the limit (the kernel
// writes the entry's size there), and the bytes must be within it too.
func wantEntry(raw []byte, sized bool, size []byte, limit int64) error {
	if sized {
		n, err := ParseSize(size)
		if err != nil {
			return ErrBadSize
		}
		if n > limit {
			return ErrTooLarge
		}
	}
	if int64(len(raw)) > limit {
		return ErrTooLarge
	}
	return nil
}

// checkEntry checks what readEntry (or Fetch) did with the entry name
// against want.
func checkEntry(t *testing.T, name string, want error, got []byte, err error, raw []byte, limit int64) {
	t.Helper()
	if want != nil {
		if !errors.Is(err, want) {
			t.Fatalf("fw_cfg %s: error %v, want %v", name, err, want)
		}
		if !strings.Contains(err.Error(), name) {
			t.Fatalf("error %q does not name the entry %s", err, name)
		}
		return
	}
	if err != nil {
		t.Fatalf("fw_cfg %s of %d bytes (limit %d): %v", name, len(raw), limit, err)
	}
	if !bytes.Equal(got, raw) || got == nil || int64(len(got)) > limit {
		t.Fatalf("fw_cfg %s: read %d bytes (limit %d), the entry holds %d", name, len(got), limit, len(raw))
	}
}

// FuzzFetch feeds fw_cfg entries — the bytes and size file of the config,
// of its signature and of CoreOS's Ignition config, each there or not —
// to Fetch, and the config entry to readEntry under a small limit. What
// they return is exactly the entry's bytes, never more than the cap; a
// size file that is not a count is ErrBadSize, and an entry over its cap,
// by its size file or its bytes, is ErrTooLarge, both naming the entry;
// absence (ErrAbsent) is exactly neither config entry being there.
func FuzzFetch(f *testing.F) {
	ign := []byte(`{"ignition":{"version":"3.4.0"}}`)
	size := func(b []byte) string { return strconv.Itoa(len(b)) + "\n" }
	cfg, sig := []byte(config), []byte("sig")
	n := uint16(len(cfg))
	// present: 1 config, 2 its size file, 4 signature, 8 its size file,
	// 16 CoreOS config, 32 its size file.
	f.Add(cfg, size(cfg), sig, size(sig), ign, size(ign), uint8(0b111111), n)
	f.Add(cfg, size(cfg), []byte(nil), "", []byte(nil), "", uint8(0b000011), n-1)
	f.Add([]byte(nil), "", []byte(nil), "", ign, size(ign), uint8(0b110000), n)
	f.Add(cfg, "", sig, "", []byte(nil), "", uint8(0b000101), uint16(0))
	f.Add(cfg, strconv.Itoa(MaxConfigSize+1)+"\n", []byte(nil), "", []byte(nil), "", uint8(0b000011), n)
	f.Add(cfg, "lots\n", []byte(nil), "", []byte(nil), "", uint8(0b000011), n)
	f.Add(cfg, size(cfg), sig, strconv.Itoa(MaxSignatureSize+1)+"\n", []byte(nil), "", uint8(0b001111), n)
	f.Add([]byte(nil), "", sig, size(sig), []byte(nil), "", uint8(0b001100), n)
	f.Add(cfg, "1\n", []byte(nil), "", []byte(nil), "", uint8(0b000011), uint16(1))
	f.Add([]byte{}, "0\n", []byte{}, "0\n", []byte(nil), "", uint8(0b001111), uint16(0))

	root := f.TempDir()
	entries := map[string]*fuzzEntry{}
	for _, name := range []string{ConfigName, SignatureName, CoreOSConfigName} {
		entries[name] = newFuzzEntry(f, root, name)
	}
	f.Fuzz(func(t *testing.T, cfg []byte, cfgSize string, sig []byte, sigSize string,
		coreos []byte, coreosSize string, present uint8, limit uint16,
	) {
		type entry struct {
			name    string
			raw     []byte
			size    []byte
			present bool
			sized   bool
		}
		cfgE := entry{ConfigName, cfg, []byte(cfgSize), present&1 != 0, present&2 != 0}
		sigE := entry{SignatureName, sig, []byte(sigSize), present&4 != 0, present&8 != 0}
		coreosE := entry{CoreOSConfigName, coreos, []byte(coreosSize), present&16 != 0, present&32 != 0}
		for _, e := range []entry{cfgE, sigE, coreosE} {
			entries[e.name].set(t, e.present, e.raw, e.sized, e.size)
		}

		if cfgE.present {
			got, err := readEntry(root, ConfigName, int64(limit))
			checkEntry(t, ConfigName, wantEntry(cfg, cfgE.sized, cfgE.size, int64(limit)), got, err, cfg, int64(limit))
		}

		found, err := Provider{Root: root}.Fetch(context.Background())
		chosen := cfgE
		if !chosen.present {
			chosen = coreosE
		}
		if !chosen.present {
			if !errors.Is(err, configsource.ErrAbsent) {
				t.Fatalf("no config entry: Fetch gave %v, %v, want ErrAbsent", found, err)
			}
			return
		}
		if errors.Is(err, configsource.ErrAbsent) {
			t.Fatalf("the entry %s is there, but Fetch says %v", chosen.name, err)
		}
		if want := wantEntry(chosen.raw, chosen.sized, chosen.size, MaxConfigSize); want != nil {
			checkEntry(t, chosen.name, want, nil, err, chosen.raw, MaxConfigSize)
			return
		}
		if sigE.present {
			if want := wantEntry(sig, sigE.sized, sigE.size, MaxSignatureSize); want != nil {
				checkEntry(t, SignatureName, want, nil, err, sig, MaxSignatureSize)
				return
			}
		}
		require.NoError(t, err)
		checkEntry(t, chosen.name, nil, found.Config, nil, chosen.raw, MaxConfigSize)
		if sigE.present {
			checkEntry(t, SignatureName, nil, found.Signature, nil, sig, MaxSignatureSize)
		} else if found.Signature != nil {
			t.Fatalf("no signature entry, but Fetch found a signature of %d bytes", len(found.Signature))
		}
		if want := "QEMU fw_cfg (" + chosen.name + ")"; found.Source != want {
			t.Fatalf("source %q, want %q", found.Source, want)
		}
	})
}
