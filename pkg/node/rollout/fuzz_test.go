package rollout

import (
	"testing"
)

// FuzzDecode feeds the record reader what any node could have written
// into the cluster's ConfigMap: it reads or refuses, and what it reads
// writes back and reads the same.
func FuzzDecode(f *testing.F) {
	var r Record
	_ = r.Start(v020, members, "cp-1", t0, false)
	_ = r.Set(v020.Digest, "cp-1", NodeRolledBack, "etcd unhealthy", t0)
	seed, _ := marshal(r)
	f.Add(seed)
	f.Add(`{"rollout":{"phase":"rolling","nodes":[{"name":"a","phase":"waiting"}]}}`)
	f.Add(`{"bad":[{}]}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, data string) {
		r, err := decode(data)
		if err != nil {
			return
		}
		_, _ = r.Turn()
		_ = r.Summary()
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
	})
}
