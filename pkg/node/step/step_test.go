package step

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestShowsInStatus(t *testing.T) {
	for _, tc := range []struct {
		result Result
		want   bool
	}{
		{Started, true},
		{Waiting, true},
		{Lock, true},
		{Done, false},
		{Failed, false},
		{Retry, false},
		{Applied, false},
		{Writing, false},
		{RestoringEtcd, false},
		{Result(""), false},
		{Result("rolled-back"), false},
	} {
		t.Run(string(tc.result), func(t *testing.T) {
			assert.Equal(t, tc.want, tc.result.ShowsInStatus())
		})
	}
}

// TestValues pins what the journal on disk holds: a value, once written,
// never changes.
func TestValues(t *testing.T) {
	for want, r := range map[string]Result{
		"started": Started, "done": Done, "waiting": Waiting, "lock": Lock,
		"retry": Retry, "diagnostics": Diagnostics, "warning": Warning,
		"progress": Progress, "skipped": Skipped, "off": Off, "failed": Failed,
		"refused": Refused, "applied": Applied, "verified": Verified,
		"healed": Healed, "reached": Reached, "changed": Changed, "passed": Passed,
		"stepped": Stepped, "synced": Synced, "pulled": Pulled,
		"present": Present, "gone": Gone, "taken": Taken, "written": Written,
		"snapshot": Snapshot, "restoring": Restoring, "restored": Restored,
		"restoring etcd": RestoringEtcd, "restored etcd": RestoredEtcd,
		"etcd kept": EtcdKept, "checked": Checked, "writing": Writing,
		"staged": Staged, "installed": Installed, "published": Published,
		"committed": Committed, "rolled back": RolledBack,
	} {
		assert.Equal(t, want, string(r))
	}
}
