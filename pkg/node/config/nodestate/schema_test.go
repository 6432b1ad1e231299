package nodestate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeJournal puts data where a STATE at root keeps its journal, as
// another build would have written it.
func writeJournal(t *testing.T, root, data string) string {
	t.Helper()
	p := filepath.Join(root, "terrarium", "journal.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	return p
}

// A journal from before the schema field is schema 1: read as today's
// format, migrated in memory (the file is not touched by opening it) and
// written back as schema 2 at the next save.
func TestJournalWithoutSchemaIsMigrated(t *testing.T) {
	root := t.TempDir()
	old := `{"enrollment": {"digest": "sha256:ab", "source": "TERRA-CONFIG", "at": "2026-11-26T05:00:00Z"},` +
		`"kubeadm": {"node": "n", "done": ["container runtime"]}, "boots": [{"boot": 7, "bootID": "b7", "slot": "a", "steps": []}]}`
	p := writeJournal(t, root, old)

	s, err := At(root).OpenJournal()
	require.NoError(t, err)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, old, string(data), "opening does not write")
	s.Read(func(j *Journal) {
		assert.Equal(t, Schema, j.Schema)
		require.NotNil(t, j.Enrollment)
		assert.Equal(t, "sha256:ab", j.Enrollment.Digest)
		assert.True(t, j.Kubeadm.IsDone("container runtime"))
	})

	require.NoError(t, s.Update(func(j *Journal) { j.Current("b8", "a") }))
	data, err = os.ReadFile(p)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "{\n  \"schema\": 2,\n"), "saved as schema 2:\n%s", data)
	j := load(t, root)
	assert.Equal(t, 2, j.Schema)
	assert.Equal(t, 8, j.Boots[len(j.Boots)-1].Boot, "the boots go on")
}

// A journal a newer build wrote (the node rolled back to an older slot):
// the writer refuses it, naming the file, both schemas and the way out,
// and leaves it as it is; read-only readers read what they know.
func TestNewerJournal(t *testing.T) {
	root := t.TempDir()
	newer := `{"schema": 3, "enrollment": {"digest": "sha256:ab", "source": "TERRA-CONFIG", "at": "2026-11-26T05:00:00Z", "quorum": 2},` +
		`"upgrade": {"digest": "sha256:up", "from": "0.1.0", "to": "0.3.0", "fromSlot": "a", "toSlot": "b", "state": "rolled-back", "installedAt": "2026-11-26T06:00:00Z"},` +
		`"leases": [{"name": "x"}], "boots": [{"boot": 3, "bootID": "b3", "slot": "b", "steps": []}]}`
	p := writeJournal(t, root, newer)

	t.Run("the writer refuses it", func(t *testing.T) {
		s, err := At(root).OpenJournal()
		require.ErrorIs(t, err, ErrNewerSchema)
		assert.Nil(t, s)
		for _, want := range []string{p, "schema 3", "schema 2", "older slot", "Boot the slot that wrote it", "firstboot reset"} {
			assert.Contains(t, err.Error(), want)
		}
		data, rerr := os.ReadFile(p)
		require.NoError(t, rerr)
		assert.Equal(t, newer, string(data), "not rewritten")
	})

	t.Run("read-only readers read what they know", func(t *testing.T) {
		j, err := At(root).ReadJournal()
		require.NoError(t, err)
		assert.Equal(t, 3, j.Schema, "the schema it was written in")
		require.NotNil(t, j.Enrollment)
		assert.Equal(t, "sha256:ab", j.Enrollment.Digest)
		require.NotNil(t, j.Upgrade)
		assert.Equal(t, UpgradeRolledBack, j.Upgrade.State)
		assert.Equal(t, "0.3.0", j.Upgrade.To)
		require.Len(t, j.Boots, 1)
		raw, err := At(root).JournalBytes(1 << 20)
		require.NoError(t, err)
		assert.Equal(t, newer, string(raw), "the bundle's copy is the file")
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, newer, string(data), "not rewritten")
	})
}

// migrate's cases: absent, each known schema, newer, nonsense.
func TestMigrate(t *testing.T) {
	for _, tt := range []struct {
		in, want int
		wantErr  bool
	}{
		{0, Schema, false},
		{1, Schema, false},
		{Schema, Schema, false},
		{Schema + 1, Schema + 1, false},
		{-1, -1, true},
	} {
		j := &Journal{Schema: tt.in}
		err := migrate(j)
		if tt.wantErr {
			assert.Error(t, err, "schema %d", tt.in)
			continue
		}
		require.NoError(t, err, "schema %d", tt.in)
		assert.Equal(t, tt.want, j.Schema, "schema %d", tt.in)
	}
}
