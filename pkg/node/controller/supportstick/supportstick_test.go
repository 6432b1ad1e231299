package supportstick

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/controller/controllertest"
)

func newController(t *testing.T) (*Controller, *controllertest.Media, *controllertest.Reporter) {
	t.Helper()
	h := controllertest.Host(t)
	m := &controllertest.Media{Host: h, Dir: "/stick"}
	r := &controllertest.Reporter{}
	return &Controller{Host: h, Media: m, Report: r}, m, r
}

// One bundle per insertion, with the audit log beside it; the stick left
// in gets no second one; the console says it may be removed.
func TestOneBundlePerInsertion(t *testing.T) {
	c, m, r := newController(t)
	ctx := context.Background()
	require.NoError(t, c.Reconcile(ctx))
	assert.Zero(t, m.Uses, "no stick, nothing used")

	require.NoError(t, os.MkdirAll(c.Host.Path(layout.AuditLogDir), 0o700))
	require.NoError(t, os.WriteFile(c.Host.Path(layout.AuditLogDir+"/audit.log"), []byte("{}\n"), 0o600))
	m.Insert(layout.LabelSupportFAT, "/dev/sdb1")
	require.NoError(t, c.Reconcile(ctx))
	require.NoError(t, c.Reconcile(ctx))
	bundles, err := filepath.Glob(c.Host.Path("/stick/terrarium-support-*.tar.gz"))
	require.NoError(t, err)
	assert.Len(t, bundles, 1)
	assert.Equal(t, 1, m.Uses, "the stick left in is not written again")
	require.Len(t, r.Steps(), 1)
	assert.Regexp(t, `^support bundle=written: terrarium-support-\S+\.tar\.gz: \d+ files, \d+ redactions; the audit log in \S+-audit \(1 files, 3 bytes\)$`, r.Steps()[0])
	assert.Contains(t, r.Console(), "to the TERRA-SUPPORT stick; it may be removed")

	m.Pull()
	m.Insert(layout.LabelSupport, "/dev/sdb1")
	require.NoError(t, c.Reconcile(ctx))
	assert.Equal(t, 2, m.Uses, "a new insertion is written")
}

// A stick that cannot be written is said and noted, and the controller
// goes on.
func TestStickNotWritable(t *testing.T) {
	c, m, r := newController(t)
	m.UseErr = errors.New("the medium is write-protected (read-only); use a writable stick")
	m.Insert(layout.LabelSupport, "/dev/sdc1")
	require.NoError(t, c.Reconcile(context.Background()))
	assert.Equal(t, []string{"support bundle=failed: the medium is write-protected (read-only); use a writable stick"}, r.Steps())
	assert.Contains(t, r.Console(), "support: no bundle written to /dev/sdc1: the medium is write-protected")
}
