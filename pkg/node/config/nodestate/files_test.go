package nodestate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Every file is where the on-disk contract says, on a host and on a STATE
// mounted elsewhere, and names itself as a running node sees it.
func TestFilePaths(t *testing.T) {
	h := &host.Host{Root: t.TempDir()}
	for f, want := range map[File]string{
		JournalFile:        "/state/terrarium/journal.json",
		ConfigFile:         "/state/terrarium/machine.yaml",
		MarkerFile:         "/state/terrarium/created",
		ResetRequestFile:   "/state/terrarium/reset-requested",
		UpgradeRequestFile: "/state/terrarium/upgrade-request.json",
		UpgradeResultFile:  "/state/terrarium/upgrade-result.json",
	} {
		assert.Equal(t, want, f.String())
		assert.Equal(t, filepath.Join(h.Root, want), On(h).path(f))
		assert.Equal(t, filepath.Join("/sysroot", want), At("/sysroot"+layout.StateMount).path(f))
	}
}

// The stored config: 0600, bounded both ways, named in errors.
func TestStoredConfig(t *testing.T) {
	root := t.TempDir()
	s := At(root)
	_, err := s.ReadConfig()
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), filepath.Join(root, "terrarium", "machine.yaml"))

	require.NoError(t, s.StoreConfig([]byte("hostname: n\n")))
	got, err := s.ReadConfig()
	require.NoError(t, err)
	assert.Equal(t, "hostname: n\n", string(got))
	fi, err := os.Stat(s.path(ConfigFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	big := make([]byte, MaxConfigSize+1)
	require.ErrorIs(t, s.StoreConfig(big), ErrTooLarge)
	require.NoError(t, os.WriteFile(s.path(ConfigFile), big, 0o600))
	_, err = s.ReadConfig()
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestMarker(t *testing.T) {
	s := At(t.TempDir())
	_, err := s.ReadMarker()
	require.ErrorIs(t, err, os.ErrNotExist)
	at := time.Date(2026, 11, 26, 5, 0, 0, 0, time.FixedZone("CET", 3600))
	require.NoError(t, s.CreateMarker(Marker{Created: at, Slot: "b"}))
	line, err := s.ReadMarker()
	require.NoError(t, err)
	assert.Equal(t, "created=2026-11-26T04:00:00Z slot=b", line)
	require.NoError(t, s.CreateMarker(Marker{Created: at, Slot: "a", InstalledFrom: "ISO 0.2.0"}))
	line, err = s.ReadMarker()
	require.NoError(t, err)
	assert.Equal(t, "created=2026-11-26T04:00:00Z slot=a installed-from=ISO 0.2.0", line)
}

// The reset request, as `firstboot reset` writes it and the initramfs
// reads it.
func TestResetRequest(t *testing.T) {
	s := At(t.TempDir())
	_, ok := s.ResetRequested()
	assert.False(t, ok)
	require.NoError(t, s.RequestReset(time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)))
	at, ok := s.ResetRequested()
	assert.True(t, ok)
	assert.Equal(t, "requested at 2026-11-26T02:00:00Z", at)
}

// A request goes from `firstboot upgrade` to the runner and its answer
// back; each side takes (removes) what it read.
func TestUpgradeRequestAndResult(t *testing.T) {
	s := At(t.TempDir())
	waiting, err := s.UpgradeRequestWaiting()
	require.NoError(t, err)
	assert.False(t, waiting)
	_, err = s.TakeUpgradeRequest()
	require.ErrorIs(t, err, ErrNoUpgradeRequest)

	req := UpgradeRequest{Path: "/run/u.tar", Force: true, ID: "1"}
	require.NoError(t, s.PutUpgradeRequest(req))
	fi, err := os.Stat(s.path(UpgradeRequestFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	waiting, err = s.UpgradeRequestWaiting()
	require.NoError(t, err)
	assert.True(t, waiting)
	got, err := s.TakeUpgradeRequest()
	require.NoError(t, err)
	assert.Equal(t, req, got)
	assert.NoFileExists(t, s.path(UpgradeRequestFile), "taken")

	_, ok, err := s.TakeUpgradeResult("1")
	require.NoError(t, err)
	assert.False(t, ok, "no answer yet")
	require.NoError(t, s.AnswerUpgradeRequest(UpgradeResult{ID: "0", Outcome: "refused"}))
	_, ok, err = s.TakeUpgradeResult("1")
	require.NoError(t, err)
	assert.False(t, ok, "an older request's answer")
	require.NoError(t, s.AnswerUpgradeRequest(UpgradeResult{ID: "1", Outcome: "installed", Version: "0.2.0", Slot: "b"}))
	res, ok, err := s.TakeUpgradeResult("1")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, UpgradeResult{ID: "1", Outcome: "installed", Version: "0.2.0", Slot: "b"}, res)
	assert.NoFileExists(t, s.path(UpgradeResultFile), "taken")
	require.NoError(t, s.RemoveUpgradeResult(), "nothing to remove")
}

// A request that cannot be read is taken all the same, and said to be bad
// with what was read of it: the runner answers it.
func TestBadUpgradeRequest(t *testing.T) {
	for name, data := range map[string]string{
		"not JSON":     "{",
		"no file":      `{"id": "7"}`,
		"too large":    `{"id": "7", "path": "` + strings.Repeat("x", maxRequestSize) + `"}`,
		"wrong fields": `{"path": 1}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := At(t.TempDir())
			require.NoError(t, s.MakeDir())
			require.NoError(t, os.WriteFile(s.path(UpgradeRequestFile), []byte(data), 0o600))
			req, err := s.TakeUpgradeRequest()
			require.ErrorIs(t, err, ErrBadUpgradeRequest)
			if name == "no file" {
				assert.Equal(t, "7", req.ID, "answered under its ID")
			}
			assert.NoFileExists(t, s.path(UpgradeRequestFile))
		})
	}
}

// The health probe leaves nothing, and fails where nothing can be written.
func TestProbeWritable(t *testing.T) {
	s := At(t.TempDir())
	require.NoError(t, s.ProbeWritable([]byte("boot")))
	entries, err := os.ReadDir(s.path(dir))
	require.NoError(t, err)
	assert.Empty(t, entries)

	require.NoError(t, os.MkdirAll(filepath.Join(s.path(healthProbe), "blocker"), 0o755))
	assert.Error(t, s.ProbeWritable([]byte("boot")))
}
