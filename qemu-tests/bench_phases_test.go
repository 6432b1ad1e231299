//go:build e2e

package qemutests

import (
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/nodestate"
)

// TestJournalPhases: a retried step shows in the timeline as a failed
// attempt with the journal's reason, then as the attempt that ended it;
// the journal's own bookkeeping (started, diagnostics, waiting) does not;
// the images a step pulled are its detail, not steps of their own.
func TestJournalPhases(t *testing.T) {
	start := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	j := nodestate.Journal{Boots: []nodestate.BootRecord{{Steps: []nodestate.StepRecord{
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
	}}}}
	got := journalPhases(j, start)
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	want := []string{"power-on → firstboot (boot)", "wait for the API", "join phase preflight (retry)", "join phase preflight", "pull images"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Fatalf("phases %q, want %q", names, want)
	}
	if !strings.Contains(got[2].Detail, "image pull timed out") || got[3].Detail != "" {
		t.Errorf("details %q and %q: want the retry's reason on the failed attempt only", got[2].Detail, got[3].Detail)
	}
	if want := "pulled registry.k8s.io/pause:3.10.2 in 1.0 s, registry.k8s.io/etcd:3.6.8-0 in 9.0 s"; got[4].Detail != want || got[4].End != 251 {
		t.Errorf("pull images: detail %q, end %v; want %q, 251", got[4].Detail, got[4].End, want)
	}
	if got[2].End != 170 || got[0].End != 100 {
		t.Errorf("ends %v and %v, want 170 and 100", got[2].End, got[0].End)
	}
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
	if n != 2 || !ok || !last.Equal(time.Date(2026, 11, 25, 18, 3, 4, 0, time.UTC)) {
		t.Errorf("flannel: %d pods, last %s, ready %v; want 2, 18:03:04, true", n, last, ok)
	}
	if n, _, ok := lastReady(out+"kube-proxy-x2 False 2026-11-25T18:05:00Z\r\n", "kube-proxy-"); n != 2 || ok {
		t.Errorf("kube-proxy with one not Ready: %d pods, ready %v; want 2, false", n, ok)
	}
	if n, _, ok := lastReady("kube-proxy-x3  \r\n", "kube-proxy-"); n != 1 || ok {
		t.Errorf("a pod without a Ready condition yet: %d pods, ready %v; want 1, false", n, ok)
	}
	if _, _, ok := lastReady("", "kube-proxy-"); ok {
		t.Error("no pods at all counted as Ready")
	}
}
