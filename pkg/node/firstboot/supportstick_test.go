package firstboot

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// A TERRA-SUPPORT stick inserted into a running node gets one support
// bundle per insertion, the node's secrets redacted, and the console says
// it may be removed.
func TestSupportStick(t *testing.T) {
	e := enrolled(t, fullConfig)
	o := e.optionsWith(noStick())
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	require.Eventually(t, func() bool { s := e.statusIfAny(); return s != nil && s.State == status.StateVerified }, 5*time.Second, time.Millisecond)

	bundles := func() []string {
		m, _ := filepath.Glob(e.path("/stick/terrarium-support-*.tar.gz"))
		return m
	}
	e.mkdir("/stick")
	// A control plane's audit log: copied whole beside the bundle.
	e.mkdir(layout.AuditLogDir)
	require.NoError(t, os.WriteFile(e.path(layout.AuditLogDir+"/audit.log"), []byte(`{"kind":"Event","verb":"get"}`+"\n"), 0o600))
	e.media.insert("TERRA-SUPPO", "/dev/sdb1", "/stick")
	require.Eventually(t, func() bool {
		return strings.Contains(strings.Join(stepResults(e.lastBoot()), " "), "support bundle=written")
	}, 10*time.Second, time.Millisecond)
	require.Len(t, bundles(), 1)
	time.Sleep(50 * time.Millisecond) // many more looks at the same stick
	assert.Len(t, bundles(), 1, "one bundle per insertion")

	f, err := os.Open(bundles()[0])
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "PRIVATE KEY-----\nM", "%s holds a private key", h.Name)
	}
	assert.Contains(t, strings.Join(names, " "), "node/status.json")
	copied, err := filepath.Glob(e.path("/stick/terrarium-support-node-1-*-audit/audit.log"))
	require.NoError(t, err)
	require.Len(t, copied, 1, "the audit log beside the bundle")
	b, err := os.ReadFile(copied[0])
	require.NoError(t, err)
	assert.Equal(t, `{"kind":"Event","verb":"get"}`+"\n", string(b))

	cancel()
	require.NoError(t, <-done)
	assert.Contains(t, e.console.String(), "support: wrote terrarium-support-node-1-")
	assert.Contains(t, e.console.String(), "to the TERRA-SUPPORT stick; it may be removed")
	assert.Regexp(t, `support: copied the audit log to terrarium-support-node-1-\S+-audit \(1 files, 30 bytes\)`, e.console.String())
}
