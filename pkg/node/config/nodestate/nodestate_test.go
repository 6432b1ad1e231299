package nodestate

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// save writes j as the journal of a STATE at root, through a Store.
func save(t *testing.T, root string, j *Journal) {
	t.Helper()
	s, err := At(root).OpenJournal()
	require.NoError(t, err)
	require.NoError(t, s.Update(func(cur *Journal) { *cur = *j }))
}

// load reads the journal of a STATE at root.
func load(t *testing.T, root string) *Journal {
	t.Helper()
	j, err := At(root).ReadJournal()
	require.NoError(t, err)
	return j
}

func TestLoadMissing(t *testing.T) {
	j, err := At(filepath.Join(t.TempDir(), "state")).ReadJournal()
	require.NoError(t, err)
	assert.Equal(t, &Journal{Schema: Schema}, j, "an empty journal")
}

func TestLoadErrors(t *testing.T) {
	root := t.TempDir()
	bad := filepath.Join(root, "terrarium", "journal.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(bad), 0o755))
	require.NoError(t, os.WriteFile(bad, []byte(`{"boots": [`), 0o644))
	_, err := At(root).ReadJournal()
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad, "the error names the file")
	_, err = At(root).OpenJournal()
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad, "the error names the file")

	// A directory cannot be read as a file: not "missing".
	require.NoError(t, os.Remove(bad))
	require.NoError(t, os.Mkdir(bad, 0o755))
	_, err = At(root).ReadJournal()
	assert.Error(t, err)
}

func TestJournalRoundTrip(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	j := &Journal{
		Provisioned: &Provisioned{ConfigDigest: "sha256:abc", At: at, Boot: 1},
		Boots: []BootRecord{
			{Boot: 1, BootID: "id-1", Slot: "a", Mode: "provision", Result: "provisioned", Steps: []StepRecord{
				{Name: "hostname", Result: "applied", At: at},
				{Name: "health", Result: "failed", Detail: "health check failed: x", At: at.Add(time.Second)},
			}},
			{Boot: 2, BootID: "id-2", Slot: "b", Steps: []StepRecord{}},
		},
	}
	root := filepath.Join(t.TempDir(), "state")
	save(t, root, j)
	path := filepath.Join(root, "terrarium", "journal.json")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	if !strings.HasSuffix(string(data), "}\n") || !strings.HasPrefix(string(data), "{\n  \"schema\": 2,\n") || !strings.Contains(string(data), "\n  \"boots\": [") {
		t.Errorf("journal is not indented JSON, naming its schema first, ending in a newline:\n%s", data)
	}
	got := load(t, root)
	j.Schema = Schema
	if !reflect.DeepEqual(got, j) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, j)
	}

	// Saving again replaces the file.
	j.Provisioned = nil
	save(t, root, j)
	got = load(t, root)
	if got.Provisioned != nil || len(got.Boots) != 2 {
		t.Errorf("after second Save: %+v", got)
	}
}

func TestJournalCurrent(t *testing.T) {
	j := &Journal{}
	r1 := j.Current("id-1", "a")
	if r1.Boot != 1 || r1.BootID != "id-1" || r1.Slot != "a" || r1.Steps == nil || len(r1.Steps) != 0 {
		t.Errorf("first record = %+v", r1)
	}
	r1.Steps = append(r1.Steps, StepRecord{Name: "hostname", Result: "applied"})
	// The same boot id gets the same record back.
	if again := j.Current("id-1", "a"); again != r1 || len(again.Steps) != 1 {
		t.Errorf("Current(same id) = %+v, want the existing record", again)
	}
	r2 := j.Current("id-2", "b")
	if r2.Boot != 2 || r2.Slot != "b" || len(r2.Steps) != 0 {
		t.Errorf("second record = %+v", r2)
	}
	if len(j.Boots) != 2 {
		t.Errorf("%d boots", len(j.Boots))
	}
	// Only the latest record is reused: an old boot id (a clock or
	// boot_id collision) starts a new record.
	if r := j.Current("id-1", "a"); r.Boot != 3 {
		t.Errorf("Current(older id) = %+v, want a new record 3", r)
	}
	// An empty boot id (unreadable boot_id) is still a boot.
	if r := j.Current("", "a"); r.Boot != 4 {
		t.Errorf("Current(\"\") = %+v", r)
	}
}

func TestJournalKeepsLastBoots(t *testing.T) {
	root := t.TempDir()
	s, err := At(root).OpenJournal()
	require.NoError(t, err)
	for i := 1; i <= maxBoots+5; i++ {
		require.NoError(t, s.Update(func(j *Journal) { j.Current(fmt.Sprintf("id-%d", i), "a") }))
	}
	got := load(t, root)
	if len(got.Boots) != maxBoots || maxBoots != 100 {
		t.Fatalf("journal keeps %d boots, want 100", len(got.Boots))
	}
	if first, last := got.Boots[0], got.Boots[len(got.Boots)-1]; first.Boot != 6 || first.BootID != "id-6" || last.Boot != 105 {
		t.Errorf("kept boots %d..%d, want 6..105", first.Boot, last.Boot)
	}
	// Numbering continues after trimming.
	if r := got.Current("id-new", "a"); r.Boot != 106 {
		t.Errorf("next boot = %d, want 106", r.Boot)
	}

	// A journal that grew past the limit in one go is trimmed on Save.
	big := &Journal{}
	for i := 1; i <= 250; i++ {
		big.Current(fmt.Sprintf("id-%d", i), "b")
	}
	cur := &big.Boots[len(big.Boots)-1]
	_, err = big.encode()
	require.NoError(t, err)
	if len(big.Boots) != maxBoots || big.Boots[0].Boot != 151 {
		t.Errorf("after encode: %d boots from %d", len(big.Boots), big.Boots[0].Boot)
	}
	// The current record (held by the runner) is still the journal's last.
	cur.Result = "changed"
	if big.Boots[len(big.Boots)-1].Result != "changed" {
		t.Error("trimming detached the current record")
	}
}

func TestJournalSaveError(t *testing.T) {
	root := t.TempDir()
	s, err := At(root).OpenJournal()
	require.NoError(t, err, "a missing journal opens")
	// A file where the journal's directory should be.
	require.NoError(t, os.WriteFile(filepath.Join(root, "terrarium"), nil, 0o644))
	err = s.Update(func(*Journal) {})
	require.Error(t, err, "a save below a file")
	assert.Contains(t, err.Error(), "save journal")
}

func TestStoreOneWriter(t *testing.T) {
	root := t.TempDir()
	s, err := At(root).OpenJournal()
	require.NoError(t, err)
	require.NoError(t, s.Update(func(j *Journal) { j.Current("boot-1", "a") }))
	// Steps reported from many goroutines at once all land, whole.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, s.Update(func(j *Journal) {
				rec := &j.Boots[len(j.Boots)-1]
				rec.Steps = append(rec.Steps, StepRecord{Name: fmt.Sprintf("pull %d", i), Result: "pulled"})
			}))
		}()
	}
	wg.Wait()
	j := load(t, root)
	require.Len(t, j.Boots, 1)
	assert.Len(t, j.Boots[0].Steps, 20)
	entries, err := os.ReadDir(filepath.Dir(s.Path()))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
}

// Two Stores on one TERRA-STATE, as the node's service and a command run
// beside it (firstboot run --phase) hold: each Update starts from what the
// other saved, so neither loses the other's records, and each Read sees
// them.
func TestStoresOfTwoProcesses(t *testing.T) {
	root := t.TempDir()
	service, err := At(root).OpenJournal()
	require.NoError(t, err)
	require.NoError(t, service.Update(func(j *Journal) { j.Current("boot-1", "a") }))
	command, err := At(root).OpenJournal()
	require.NoError(t, err)

	var wg sync.WaitGroup
	for i := range 10 {
		for name, s := range map[string]*Store{"service": service, "command": command} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, s.Update(func(j *Journal) {
					rec := j.Current("boot-1", "a")
					rec.Steps = append(rec.Steps, StepRecord{Name: fmt.Sprintf("%s %d", name, i), Result: "done"})
				}))
			}()
		}
	}
	wg.Wait()
	j := load(t, root)
	require.Len(t, j.Boots, 1)
	assert.Len(t, j.Boots[0].Steps, 20, "every record of both lands")
	var seen int
	service.Read(func(j *Journal) { seen = len(j.Boots[0].Steps) })
	assert.Equal(t, 20, seen, "the service reads the command's records")

	// A saved journal that cannot be read (a hand's edit) does not hide
	// what this Store holds from Read, and an Update replaces it with that.
	require.NoError(t, os.WriteFile(filepath.Join(root, "terrarium", "journal.json"), []byte("{"), 0o644))
	service.Read(func(j *Journal) { seen = len(j.Boots[0].Steps) })
	assert.Equal(t, 20, seen)
	require.NoError(t, service.Update(func(*Journal) {}))
	assert.Len(t, load(t, root).Boots[0].Steps, 20)
}

func TestKubeadmProgress(t *testing.T) {
	var p *KubeadmProgress
	assert.False(t, p.IsDone("x"))
	p = &KubeadmProgress{Node: "n", Done: []string{"a", "b"}}
	assert.True(t, p.IsDone("b"))
	assert.False(t, p.IsDone("c"))
}

// An upgrade's record and the upgrades marked bad survive a save and a
// load; Bad finds a bad upgrade by digest.
func TestUpgradeRecords(t *testing.T) {
	root := t.TempDir()
	s, err := At(root).OpenJournal()
	require.NoError(t, err)
	at := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	require.NoError(t, s.Update(func(j *Journal) {
		j.Upgrade = &Upgrade{Digest: "sha256:aa", From: "0.1.0", To: "0.2.1", FromSlot: "a", ToSlot: "b", Source: "TERRA-UPGRADE", State: UpgradeRolledBack, Reason: "health check failed", InstalledAt: at}
		j.BadUpgrades = append(j.BadUpgrades, BadUpgrade{Digest: "sha256:aa", Version: "0.2.1", Reason: "health check failed", At: at})
	}))
	j := load(t, root)
	require.NotNil(t, j.Upgrade)
	assert.Equal(t, UpgradeRolledBack, j.Upgrade.State)
	assert.True(t, j.Upgrade.DoneAt.IsZero())
	require.NotNil(t, j.Bad("sha256:aa"))
	assert.Equal(t, "0.2.1", j.Bad("sha256:aa").Version)
	assert.Nil(t, j.Bad("sha256:bb"))
}

// LastUpgrade is a copy: changing it changes nothing stored.
func TestLastUpgradeIsACopy(t *testing.T) {
	s, err := At(t.TempDir()).OpenJournal()
	require.NoError(t, err)
	assert.Nil(t, s.LastUpgrade(), "no upgrade yet")
	require.NoError(t, s.Update(func(j *Journal) { j.Upgrade = &Upgrade{To: "1.3.0", State: UpgradeInstalled} }))
	u := s.LastUpgrade()
	require.NotNil(t, u)
	assert.Equal(t, "1.3.0", u.To)
	u.State = UpgradeCommitted
	assert.Equal(t, UpgradeInstalled, s.LastUpgrade().State)
}
