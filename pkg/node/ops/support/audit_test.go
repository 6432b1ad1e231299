package support

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// auditLine is an audit event as kube-apiserver writes it at Metadata.
func auditLine(i int) string {
	return `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + strings.Repeat("0", 8) +
		`","stage":"ResponseComplete","verb":"create","user":{"username":"kubernetes-admin"},"objectRef":{"resource":"secrets","namespace":"default","name":"s-` +
		strings.Repeat("x", i%7) + `"}}` + "\n"
}

// The bundle holds the end of the audit log kube-apiserver is writing,
// from a whole line, capped; not the rotated, gzipped files beside it.
func TestAuditLogMember(t *testing.T) {
	e := newEnv(t, "cp-1")
	var log strings.Builder
	for i := 0; log.Len() < 3000; i++ {
		log.WriteString(auditLine(i))
	}
	e.write(layout.AuditLogDir+"/audit-2026-01-01T00-00-00.000.log.gz", "\x1f\x8b not text", 0o600)
	e.write(layout.AuditLogDir+"/audit.log", log.String(), 0o600)
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(e.h.Path(layout.AuditLogDir+"/audit-2026-01-01T00-00-00.000.log.gz"), old, old))
	require.NoError(t, os.Chtimes(e.h.Path(layout.AuditLogDir+"/audit.log"), time.Now(), time.Now()))

	_, a := e.collect(e.opts())
	assert.Equal(t, log.String(), a.files["kubernetes/audit.log"], "a log under the cap is whole")
	assert.Contains(t, a.files["index.txt"], "kubernetes/audit.log ")

	opts := e.opts()
	opts.MaxBytes = 1000
	_, a = e.collect(opts)
	got := a.files["kubernetes/audit.log"]
	assert.LessOrEqual(t, len(got), 1100)
	require.True(t, strings.HasPrefix(got, "[... "+layout.AuditLogFile+": the first "), got)
	body := got[strings.IndexByte(got, '\n')+1:]
	assert.True(t, strings.HasSuffix(log.String(), body), "the newest events, from a line's start")
	assert.True(t, strings.HasPrefix(body, `{"kind":"Event"`), body)
	assert.NotContains(t, got, "not text")
}

// A worker keeps no audit log: its member says so.
func TestAuditLogMemberOnWorker(t *testing.T) {
	e := newEnv(t, "w-1")
	_, a := e.collect(e.opts())
	assert.Equal(t, layout.AuditLogDir+" does not exist on this node (only control planes keep an audit log)\n", a.files["kubernetes/audit.log"])
}

// A TERRA-SUPPORT stick gets the whole audit log beside the bundle: the
// file being written and the rotated ones, byte for byte.
func TestCopyAuditLog(t *testing.T) {
	e := newEnv(t, "cp-1")
	rotated := "\x1f\x8b a rotated, gzipped file"
	e.write(layout.AuditLogDir+"/audit-2026-01-01T00-00-00.000.log.gz", rotated, 0o600)
	e.write(layout.AuditLogDir+"/audit.log", auditLine(1)+auditLine(2), 0o600)
	require.NoError(t, os.MkdirAll(e.h.Path("/stick"), 0o755))
	plenty := diskspace.Fixed{Avail: 1 << 30}

	c, err := copyAuditLog(context.Background(), e.h, "/stick", "terrarium-support-cp-1-x", plenty)
	require.NoError(t, err)
	assert.Equal(t, AuditCopy{Dir: "/stick/terrarium-support-cp-1-x-audit", Files: 2, Bytes: int64(len(rotated) + len(auditLine(1)+auditLine(2)))}, c)
	got, err := os.ReadFile(e.h.Path(c.Dir + "/audit-2026-01-01T00-00-00.000.log.gz"))
	require.NoError(t, err)
	assert.Equal(t, rotated, string(got))
	got, err = os.ReadFile(e.h.Path(c.Dir + "/audit.log"))
	require.NoError(t, err)
	assert.Equal(t, auditLine(1)+auditLine(2), string(got))

	// No room: refused before anything is written, with the sizes.
	tight := diskspace.Fixed{Avail: 1 << 20}
	_, err = copyAuditLog(context.Background(), e.h, "/stick", "terrarium-support-cp-1-y", tight)
	require.ErrorIs(t, err, diskspace.ErrNoSpace)
	assert.Contains(t, err.Error(), fmt.Sprintf("the audit log (2 files) needs %s on %s, which has 1.0 MiB free", diskspace.Size(uint64(c.Bytes)+auditCopyMargin), e.h.Path("/stick")))
	assert.Contains(t, err.Error(), "use a larger stick")
	assert.NoDirExists(t, e.h.Path("/stick/terrarium-support-cp-1-y-audit"))
}

// A worker keeps no audit log: nothing is copied, and that is no error.
func TestCopyAuditLogOnWorker(t *testing.T) {
	e := newEnv(t, "w-1")
	require.NoError(t, os.MkdirAll(e.h.Path("/stick"), 0o755))
	c, err := CopyAuditLog(context.Background(), e.h, "/stick", "terrarium-support-w-1-x")
	require.NoError(t, err)
	assert.Equal(t, AuditCopy{}, c)
	entries, err := os.ReadDir(e.h.Path("/stick"))
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// The bundle holds the node's CIS benchmark report.
func TestCISBenchmarkMember(t *testing.T) {
	e := newEnv(t, "cp-1")
	_, a := e.collect(e.opts())
	got := a.files["kubernetes/cis-benchmark.txt"]
	assert.Contains(t, got, "CIS Kubernetes Benchmark v1.12.0, worker: ")
	assert.Contains(t, got, "4.2.1", "the kubelet's checks")
	assert.Contains(t, got, "the kubelet is not running", "what this test's node lacks is said")
}
