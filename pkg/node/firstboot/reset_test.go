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
