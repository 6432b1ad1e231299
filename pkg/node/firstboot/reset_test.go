package firstboot

import (
	"bytes"
	"context"
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

func TestReset(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name       string
		yes        bool
		answer     string
		wantErr    error
		wantReboot bool
	}{
		{"confirmed", false, "erase\n", nil, true},
		{"--yes", true, "", nil, true},
		{"declined", false, "no\n", ErrResetDeclined, false},
		{"no answer", false, "", ErrResetDeclined, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enrolled(t, fullConfig)
			h := e.host()
			h.Clock = host.ClockFunc(now)
			var out bytes.Buffer
			reboots := 0
			err := Reset(context.Background(), ResetOptions{
				Host: h, In: strings.NewReader(tc.answer), Out: &out, Yes: tc.yes,
				Reboot: func(context.Context) error { reboots++; return nil },
			})
			assert.ErrorIs(t, err, tc.wantErr)
			assert.Contains(t, out.String(), "the enrolled config (sha256:")
			assert.Contains(t, out.String(), "from "+configFrom)
			assert.Contains(t, out.String(), "this node's etcd data")
			req := filepath.Join(e.root, layout.StateMount, layout.StateResetRequest)
			if tc.wantReboot {
				assert.Equal(t, 1, reboots)
				b, err := os.ReadFile(req)
				require.NoError(t, err)
				assert.Equal(t, "requested at 2026-11-26T02:00:00Z\n", string(b))
			} else {
				assert.Zero(t, reboots)
				assert.NoFileExists(t, req, "nothing changed")
			}
			assert.Equal(t, !tc.yes, strings.Contains(out.String(), `Type "erase"`))
		})
	}
}

// A node holding local volumes says which, and erases them only when a
// second answer (or --erase-volumes with --yes) says so too.
func TestResetWithLocalVolumes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		yes, volumes bool
		answer       string
		confirmed    bool
	}{
		{name: "both confirmed", answer: "erase\nerase volumes\n", confirmed: true},
		{name: "volumes declined", answer: "erase\nno\n"},
		{name: "volumes not answered", answer: "erase\n"},
		{name: "--yes alone", yes: true},
		{name: "--yes --erase-volumes", yes: true, volumes: true, confirmed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enrolled(t, fullConfig)
			h := e.host()
			for _, v := range []string{"pvc-2_default_data-db-0", "pvc-1_plant_data-historian-0", ".terrarium-volume-area", "lost+found"} {
				require.NoError(t, os.MkdirAll(h.Path(filepath.Join(layout.LocalVolumesDir, v)), 0o700))
			}
			var out bytes.Buffer
			reboots := 0
			err := Reset(context.Background(), ResetOptions{
				Host: h, In: strings.NewReader(tc.answer), Out: &out, Yes: tc.yes, EraseVolumes: tc.volumes,
				Reboot: func(context.Context) error { reboots++; return nil },
			})
			assert.Contains(t, out.String(), "the 2 local volumes of workloads in /var/lib/terrarium/volumes (their data is in no backup):\n"+
				"      pvc-1_plant_data-historian-0\n      pvc-2_default_data-db-0\n")
			req := filepath.Join(e.root, layout.StateMount, layout.StateResetRequest)
			if tc.confirmed {
				require.NoError(t, err)
				assert.Equal(t, 1, reboots)
				assert.FileExists(t, req)
				return
			}
			require.ErrorIs(t, err, ErrResetDeclined)
			if tc.yes {
				assert.ErrorContains(t, err, "add --erase-volumes")
			} else {
				assert.Contains(t, out.String(), `Type "erase volumes" to erase them`)
			}
			assert.Zero(t, reboots)
			assert.NoFileExists(t, req, "nothing changed")
		})
	}
}
