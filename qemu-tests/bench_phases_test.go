//go:build e2e

package qemutests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
)

// TestJournalPhases: a retried step shows in the timeline as a failed
// attempt with the journal's reason, then as the attempt that ended it;
// the journal's own bookkeeping (started, diagnostics, waiting) does not;
// the images a step pulled, or found present, are its detail, not steps
// of their own.
func TestJournalPhases(t *testing.T) {
	start := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	j := nodestate.Journal{Boots: []nodestate.BootRecord{
		{Steps: []nodestate.StepRecord{
			{Name: "wait for the API", Result: "applied", At: at(100)},
			{Name: "join phase preflight", Result: "started", At: at(101)},
			{Name: "join phase preflight", Result: "retry", Detail: "attempt 1 of 3 failed: image pull timed out", At: at(170)},
			{Name: "join phase preflight", Result: "diagnostics", Detail: "kubelet log: ...", At: at(171)},
			{Name: "join phase preflight", Result: "applied", At: at(240)},
			{Name: "pull images", Result: "started", At: at(241)},
			{Name: "pull images", Result: "pulled", Detail: "registry.k8s.io/pause:3.10.2 in 1.0 s", At: at(242)},
			{Name: "pull images", Result: "waiting", Detail: "for the registry", At: at(243)},
			{Name: "pull images", Result: "pulled", Detail: "registry.k8s.io/etcd:3.6.8-0 in 9.0 s", At: at(250)},
			{Name: "pull images", Result: "done", At: at(251)},
		}},
		// The next node's images were all in containerd's store.
		{Steps: []nodestate.StepRecord{
			{Name: "pull images", Result: "started", At: at(300)},
			{Name: "pull images", Result: "present", Detail: "8 of 8 images in containerd's store already", At: at(301)},
			{Name: "pull images", Result: "done", At: at(302)},
		}},
	}}
	got := journalPhases(j, start)
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"power-on → firstboot (boot)", "wait for the API", "join phase preflight (retry)", "join phase preflight", "pull images", "pull images"}, names)
	assert.Contains(t, got[2].Detail, "image pull timed out", "the failed attempt's reason")
	assert.Empty(t, got[3].Detail, "the reason stays on the failed attempt")
	assert.Equal(t, "pulled registry.k8s.io/pause:3.10.2 in 1.0 s, registry.k8s.io/etcd:3.6.8-0 in 9.0 s", got[4].Detail)
	assert.Equal(t, 251.0, got[4].End)
	assert.Equal(t, "8 of 8 images in containerd's store already", got[5].Detail)
	assert.Equal(t, 302.0, got[5].End)
	assert.Equal(t, 170.0, got[2].End)
	assert.Equal(t, 100.0, got[0].End)
}

// TestLastReady: readyMarks' parsing of kubectl's "name status time"
// lines, as a pty delivers them: the count and latest time of the names
// with the prefix, and not Ready while any of them is not.
func TestLastReady(t *testing.T) {
	out := "kube-flannel-ds-abcde True 2026-11-25T18:01:02Z\r\n" +
		"kube-proxy-x1 True 2026-11-25T18:00:30Z\r\n" +
		"kube-flannel-ds-fghij True 2026-11-25T18:03:04Z\r\n" +
		"coredns-1 True 2026-11-25T18:09:00Z\r\n"
	n, last, ok := lastReady(out, "kube-flannel-ds-")
	assert.Equal(t, 2, n, "flannel's pods")
	assert.True(t, ok, "flannel Ready")
	assert.Equal(t, time.Date(2026, 11, 25, 18, 3, 4, 0, time.UTC), last.UTC())

	n, _, ok = lastReady(out+"kube-proxy-x2 False 2026-11-25T18:05:00Z\r\n", "kube-proxy-")
	assert.Equal(t, 2, n, "kube-proxy with one not Ready")
	assert.False(t, ok, "kube-proxy with one not Ready")

	n, _, ok = lastReady("kube-proxy-x3  \r\n", "kube-proxy-")
	assert.Equal(t, 1, n, "a pod without a Ready condition yet")
	assert.False(t, ok, "a pod without a Ready condition yet")

	_, _, ok = lastReady("", "kube-proxy-")
	assert.False(t, ok, "no pods at all")
}
