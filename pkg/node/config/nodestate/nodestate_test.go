package nodestate

import (
	"errors"
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

func TestLoadMissing(t *testing.T) {
	j, err := Load(filepath.Join(t.TempDir(), "state", "terrarium", "journal.json"))
	if err != nil {
		t.Fatal(err)
	}
	if j == nil || j.Provisioned != nil || len(j.Boots) != 0 {
		t.Errorf("Load(missing) = %+v, want an empty journal", j)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "journal.json")
	if err := os.WriteFile(bad, []byte(`{"boots": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load(corrupt) = %v, want an error naming the file", err)
	}
	// A directory cannot be read as a file: not "missing".
	if _, err := Load(dir); err == nil {
		t.Error("Load(dir) succeeded")
	}
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
	path := filepath.Join(t.TempDir(), "state", "terrarium", "journal.json")
	if err := j.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(data), "}\n") || !strings.Contains(string(data), "\n  \"boots\": [") {
		t.Errorf("journal is not indented JSON ending in a newline:\n%s", data)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, j) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, j)
	}

	// Saving again replaces the file.
	j.Provisioned = nil
	if err := j.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err = Load(path)
	if err != nil {
		t.Fatal(err)
	}
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
	path := filepath.Join(t.TempDir(), "journal.json")
	j := &Journal{}
	for i := 1; i <= maxBoots+5; i++ {
		j.Current(fmt.Sprintf("id-%d", i), "a")
		if err := j.Save(path); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := big.Save(path); err != nil {
		t.Fatal(err)
	}
	if len(big.Boots) != maxBoots || big.Boots[0].Boot != 151 {
		t.Errorf("after Save: %d boots from %d", len(big.Boots), big.Boots[0].Boot)
	}
	// The current record (held by the runner) is still the journal's last.
	cur.Result = "changed"
	if big.Boots[len(big.Boots)-1].Result != "changed" {
		t.Error("trimming detached the current record")
	}
}

func TestJournalSaveError(t *testing.T) {
	dir := t.TempDir()
	// A file where the journal's directory should be.
	blocker := filepath.Join(dir, "state")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&Journal{}).Save(filepath.Join(blocker, "terrarium", "journal.json")); err == nil {
		t.Error("Save below a file succeeded")
	}
}

func TestStoreOneWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json")
	s, err := Open(path)
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
	j, err := Load(path)
	require.NoError(t, err)
	require.Len(t, j.Boots, 1)
	assert.Len(t, j.Boots[0].Steps, 20)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
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
	p := filepath.Join(t.TempDir(), "journal.json")
	s, err := Open(p)
	require.NoError(t, err)
	at := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	require.NoError(t, s.Update(func(j *Journal) {
		j.Upgrade = &Upgrade{Digest: "sha256:aa", From: "0.1.0", To: "0.2.1", FromSlot: "a", ToSlot: "b", Source: "TERRA-UPGRADE", State: UpgradeRolledBack, Reason: "health check failed", InstalledAt: at}
		j.BadUpgrades = append(j.BadUpgrades, BadUpgrade{Digest: "sha256:aa", Version: "0.2.1", Reason: "health check failed", At: at})
	}))
	j, err := Load(p)
	require.NoError(t, err)
	require.NotNil(t, j.Upgrade)
	assert.Equal(t, UpgradeRolledBack, j.Upgrade.State)
	assert.True(t, j.Upgrade.DoneAt.IsZero())
	require.NotNil(t, j.Bad("sha256:aa"))
	assert.Equal(t, "0.2.1", j.Bad("sha256:aa").Version)
	assert.Nil(t, j.Bad("sha256:bb"))
}
