package rollout

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecode feeds the record reader what a writer of the cluster's
// ConfigMap could have put there (a control plane, or a node of an older
// release during its turn): it reads or refuses, and what it reads
// writes back and reads the same, and folds, verifies and orders without
// a panic.
func FuzzDecode(f *testing.F) {
	var r Record
	_ = r.Start(v020, members, "cp-1", t0)
	_ = r.Set(v020.Digest, "cp-1", NodeRolledBack, "etcd unhealthy", t0)
	seed, _ := marshal(r)
	f.Add(seed, `{"digest":"sha256:aa","manifest":"{}","manifestSignature":"x","force":"y"}`)
	f.Add(`{"rollout":{"phase":"rolling","nodes":[{"name":"a","phase":"waiting"}]}}`, ``)
	f.Add(`{"bad":[{}],"reporting":["a","a"]}`, `{}`)
	f.Add(``, `null`)
	f.Fuzz(func(t *testing.T, data, instructions string) {
		r, err := decode(data)
		if err != nil {
			return
		}
		if r.Instructions, err = decodeInstructions(instructions); err != nil {
			return
		}
		_, _ = r.Turn()
		_ = r.Summary()
		_ = r.LegacyTurn()
		_, _ = r.Verify(nil, t0)
		if r.Rollout != nil {
			_ = r.Rollout.CheckOrder("a", false)
		}
		again, err := marshal(r)
		if err != nil {
			t.Fatalf("a read record does not write back: %v", err)
		}
		r2, err := decode(again)
		if err != nil {
			t.Fatalf("a written record does not read back: %v", err)
		}
		if b, _ := marshal(r2); b != again {
			t.Fatalf("record changed through a write and a read:\n%s\n%s", again, b)
		}
		r.Fold(map[string]Status{"a": {Node: "a", Phase: NodeRolledBack, Digest: "sha256:aa"}})
	})
}

// FuzzDecodeStatus feeds a control plane's reader of the nodes' status
// objects what a node's credential could write into its own: it reads
// or refuses, what it reads writes back and reads the same, and folds
// into a record without a panic.
func FuzzDecodeStatus(f *testing.F) {
	seed, _ := json.Marshal(Status{Node: "w-1", Version: "0.1.0", Rollout: "sha256:aa@2026-11-26T10:00:00Z", Digest: "sha256:aa",
		Phase: NodeRolledBack, Detail: "health failed", At: t0, Bad: []Bad{{Digest: "sha256:aa", Node: "w-1"}}})
	f.Add(string(seed))
	f.Add(`{"node":"w-1","phase":"done","at":"x"}`)
	f.Add(`{"bad":[{},{}]}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, data string) {
		s, err := decodeStatus(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("a read status does not write back: %v", err)
		}
		s2, err := decodeStatus(string(again))
		if err != nil {
			t.Fatalf("a written status does not read back: %v", err)
		}
		if !reflect.DeepEqual(s, s2) && string(again) != mustJSON(t, s2) {
			t.Fatalf("status changed through a write and a read:\n%s\n%s", again, mustJSON(t, s2))
		}
		var r Record
		if err := r.Start(v020, members, "cp-1", t0); err != nil {
			t.Fatal(err)
		}
		r.Fold(map[string]Status{s.Node: s, "w-1": s})
		_ = r.Summary()
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
