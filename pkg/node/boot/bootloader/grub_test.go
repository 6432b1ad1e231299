package bootloader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/grubenv"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// grubESP is an ESP with entries and GRUB's block holding env.
func grubESP(t *testing.T, env grubenv.Env, entries ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, e := range entries {
		touch(t, filepath.Join(dir, layout.ESPEntriesDir, e))
	}
	b, err := grubenv.Encode(env)
	require.NoError(t, err)
	path := filepath.Join(dir, filepath.FromSlash(layout.ESPGrubEnv))
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return dir
}

func entryNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, layout.ESPEntriesDir))
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func envOf(t *testing.T, dir string) grubenv.Env {
	t.Helper()
	env, err := readGrubEnv(dir)
	require.NoError(t, err)
	return env
}

func TestCountGrubTries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     grubenv.Env
		entries []string
		want    []string // the entries after
		said    int
	}{
		{"one try of a fresh entry", grubenv.Env{"terrarium_prefer": "b", "terrarium_tried_b": "x", "terrarium_tried_b_of": "terrarium-b+3.conf"},
			[]string{"terrarium-a.conf", "terrarium-b+3.conf"}, []string{"terrarium-a.conf", "terrarium-b+2-1.conf"}, 1},
		{"three tries before the node counted (a crash loop)", grubenv.Env{"terrarium_tried_b": "xxx", "terrarium_tried_b_of": "terrarium-b+3.conf"},
			[]string{"terrarium-a.conf", "terrarium-b+3.conf"}, []string{"terrarium-a.conf", "terrarium-b+0-3.conf"}, 1},
		{"on an entry tried before", grubenv.Env{"terrarium_tried_a": "x", "terrarium_tried_a_of": "terrarium-a+2-1.conf"},
			[]string{"terrarium-a+2-1.conf"}, []string{"terrarium-a+1-2.conf"}, 1},
		{"more tries than left (a menu choice)", grubenv.Env{"terrarium_tried_b": "xx", "terrarium_tried_b_of": "terrarium-b+1-2.conf"},
			[]string{"terrarium-a.conf", "terrarium-b+1-2.conf"}, []string{"terrarium-a.conf", "terrarium-b+0-3.conf"}, 1},
		{"counted already (a power cut before the block was cleared)", grubenv.Env{"terrarium_tried_b": "x", "terrarium_tried_b_of": "terrarium-b+3.conf"},
			[]string{"terrarium-a.conf", "terrarium-b+2-1.conf"}, []string{"terrarium-a.conf", "terrarium-b+2-1.conf"}, 0},
		{"of an entry with no try left (a menu choice of a spent slot)", grubenv.Env{"terrarium_tried_a": "x", "terrarium_tried_a_of": "terrarium-a+0-3.conf"},
			[]string{"terrarium-a+0-3.conf", "terrarium-b.conf"}, []string{"terrarium-a+0-3.conf", "terrarium-b.conf"}, 0},
		{"of a blessed name (no counter)", grubenv.Env{"terrarium_tried_a": "x", "terrarium_tried_a_of": "terrarium-a.conf"},
			[]string{"terrarium-a.conf"}, []string{"terrarium-a.conf"}, 0},
		{"of another slot's entry", grubenv.Env{"terrarium_tried_a": "x", "terrarium_tried_a_of": "terrarium-b+3.conf"},
			[]string{"terrarium-a.conf", "terrarium-b+3.conf"}, []string{"terrarium-a.conf", "terrarium-b+3.conf"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := grubESP(t, tc.env, tc.entries...)
			pending, err := grubTriesPending(dir)
			require.NoError(t, err)
			assert.True(t, pending)
			said, err := countGrubTries(dir)
			require.NoError(t, err)
			assert.Len(t, said, tc.said)
			assert.Equal(t, tc.want, entryNames(t, dir))
			env := envOf(t, dir)
			for _, s := range layout.Slots() {
				assert.Empty(t, env[s.GrubTried()], "the block's tries are cleared")
				assert.Empty(t, env[s.GrubTriedOf()])
			}
			assert.Equal(t, tc.env[layout.GrubPrefer], env[layout.GrubPrefer], "the preferred slot is kept")
			pending, err = grubTriesPending(dir)
			require.NoError(t, err)
			assert.False(t, pending, "nothing is left to count")
		})
	}
	said, err := countGrubTries(grubESP(t, grubenv.Env{"terrarium_tried_b": "x", "terrarium_tried_b_of": "terrarium-b+3.conf"}, "terrarium-b+3.conf"))
	require.NoError(t, err)
	assert.Equal(t, []string{"slot b: 1 try by GRUB counted: terrarium-b+3.conf is now terrarium-b+2-1.conf"}, said)
}

func TestCountGrubTriesWithoutBlock(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, layout.ESPEntriesDir, "terrarium-a+3.conf"))
	pending, err := grubTriesPending(dir)
	require.NoError(t, err)
	assert.False(t, pending, "a Secure Boot image's ESP has no block")
	said, err := countGrubTries(dir)
	require.NoError(t, err)
	assert.Empty(t, said)
	assert.Equal(t, []string{"terrarium-a+3.conf"}, entryNames(t, dir))
}

func TestPreferGrub(t *testing.T) {
	dir := grubESP(t, grubenv.Env{"terrarium_prefer": "a", "terrarium_tried_b": "xx", "terrarium_tried_b_of": "terrarium-b+3.conf", "terrarium_tried_a": "x", "terrarium_tried_a_of": "terrarium-a+1-2.conf"})
	require.NoError(t, PreferGrub(dir, layout.SlotB))
	assert.Equal(t, grubenv.Env{"terrarium_prefer": "b", "terrarium_tried_a": "x", "terrarium_tried_a_of": "terrarium-a+1-2.conf"}, envOf(t, dir),
		"b preferred, its old tries dropped, a's kept")
	require.NoError(t, PreferGrub(t.TempDir(), layout.SlotB), "an ESP without GRUB (a Secure Boot image) has nothing to record")

	// Beside a GRUB configuration, a missing or damaged block is written
	// anew: GRUB could record no try without it.
	for name, damage := range map[string]func(string){
		"missing": func(p string) { require.NoError(t, os.Remove(p)) },
		"damaged": func(p string) { require.NoError(t, os.WriteFile(p, make([]byte, grubenv.Size), 0o644)) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := grubESP(t, grubenv.Env{"terrarium_prefer": "a"})
			touch(t, filepath.Join(dir, filepath.FromSlash(layout.ESPGrubConfig)))
			damage(filepath.Join(dir, filepath.FromSlash(layout.ESPGrubEnv)))
			require.NoError(t, PreferGrub(dir, layout.SlotB))
			assert.Equal(t, grubenv.Env{"terrarium_prefer": "b"}, envOf(t, dir))
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(layout.ESPGrubEnv)))
			require.NoError(t, err)
			assert.Len(t, b, grubenv.Size)
			assert.NoFileExists(t, filepath.Join(dir, filepath.FromSlash(layout.ESPGrubEnv))+".new")
		})
	}
}

func TestCounter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		left, done int
		ok         bool
	}{
		{"terrarium-a+3.conf", 3, 0, true},
		{"terrarium-a+2-1.conf", 2, 1, true},
		{"terrarium-a+0-3.conf", 0, 3, true},
		{"terrarium-a.conf", 0, 0, false},
		{"terrarium-b+3.conf", 0, 0, false},
		{"terrarium-a+x.conf", 0, 0, false},
		{"terrarium-a+-1.conf", 0, 0, false},
		{"terrarium-a+1-x.conf", 0, 0, false},
		{"terrarium-a+1", 0, 0, false},
	} {
		left, done, ok := counter(tc.name, layout.SlotA)
		assert.Equal(t, []any{tc.left, tc.done, tc.ok}, []any{left, done, ok}, tc.name)
	}
}
