package support

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
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
