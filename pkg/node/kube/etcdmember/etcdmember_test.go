package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// memberList is what etcdctl 3.6 prints for `member list -w json` of
// three members, cp-2's ID beyond a float64's precision.
const memberList = `{"header":{"cluster_id":14841639068965178418,"member_id":10276657743932975437,"raft_term":3},` +
	`"members":[{"ID":10276657743932975437,"name":"cp-1","peerURLs":["https://10.77.0.10:2380"],"clientURLs":["https://10.77.0.10:2379"]},` +
	`{"ID":18446744073709551557,"name":"cp-2","peerURLs":["https://10.77.0.11:2380"],"clientURLs":["https://10.77.0.11:2379"]},` +
	`{"ID":3,"name":"cp-3","peerURLs":["https://10.77.0.12:2380"],"clientURLs":["https://10.77.0.12:2379"]}]}` + "\n"

// fakeEtcdctl answers member list with its list, endpoint health for the
// client URLs in up, and member remove by taking the member out.
type fakeEtcdctl struct {
	mu      sync.Mutex
	list    string
	up      map[string]bool
	removed []string
}

func (f *fakeEtcdctl) exec(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name != "etcdctl" {
		return nil, fmt.Errorf("%s: not faked", name)
	}
	var endpoints string
	var rest []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--endpoints="):
			endpoints = strings.TrimPrefix(a, "--endpoints=")
		case strings.HasPrefix(a, "--"):
		default:
			rest = append(rest, a)
		}
	}
	switch strings.Join(rest[:min(2, len(rest))], " ") {
	case "member list":
		return []byte(f.list), nil
	case "endpoint health":
		if f.up[endpoints] {
			return []byte(endpoints + " is healthy: successfully committed proposal: took = 2ms"), nil
		}
		return []byte(endpoints + " is unhealthy: failed to commit proposal: context deadline exceeded"), errors.New("exit status 1")
	case "member remove":
		f.removed = append(f.removed, rest[2])
		return []byte("Member " + rest[2] + " removed from cluster cdf818194e3a8c32"), nil
	}
	return nil, fmt.Errorf("etcdctl %v: not faked", args)
}

func fakeHost(t *testing.T, f *fakeEtcdctl) *host.Host {
	t.Helper()
	return &host.Host{Root: t.TempDir(), Executor: host.ExecFunc(f.exec), Clock: host.ClockFunc(time.Now)}
}

func TestParseMemberList(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Member
		err      string
	}{
		{name: "decimal IDs, a warning logged before", in: `{"level":"warn","msg":"retrying"}` + "\n" + memberList, want: []Member{
			{ID: 10276657743932975437, Name: "cp-1", PeerURLs: []string{"https://10.77.0.10:2380"}, ClientURLs: []string{"https://10.77.0.10:2379"}},
			{ID: 18446744073709551557, Name: "cp-2", PeerURLs: []string{"https://10.77.0.11:2380"}, ClientURLs: []string{"https://10.77.0.11:2379"}},
			{ID: 3, Name: "cp-3", PeerURLs: []string{"https://10.77.0.12:2380"}, ClientURLs: []string{"https://10.77.0.12:2379"}},
		}},
		{name: "hex IDs, a member not started", in: `{"members":[{"ID":"8e9e05c52164694d","name":"cp-1"},{"ID":"a1","peerURLs":["https://10.77.0.11:2380"]}]}`, want: []Member{
			{ID: 0x8e9e05c52164694d, Name: "cp-1"}, {ID: 0xa1, PeerURLs: []string{"https://10.77.0.11:2380"}},
		}},
		{name: "not JSON", in: "Error: context deadline exceeded", err: "not JSON"},
		{name: "no member", in: `{"members":[]}`, err: "names no member"},
		{name: "bad ID", in: `{"members":[{"ID":-1,"name":"cp-1"}]}`, err: `member 0 ("cp-1"): ID -1`},
		{name: "bad hex ID", in: `{"members":[{"ID":"xyz","name":"cp-1"}]}`, err: `ID "xyz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMemberList([]byte(tc.in))
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseMemberList(f *testing.F) {
	f.Add([]byte(memberList))
	f.Add([]byte(`{"members":[{"ID":"a1"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		members, err := parseMemberList(b)
		if err == nil && len(members) == 0 {
			t.Fatal("a list without members accepted")
		}
	})
}

func TestRemove(t *testing.T) {
	const cp1, cp2, cp3 = "https://10.77.0.10:2379", "https://10.77.0.11:2379", "https://10.77.0.12:2379"
	for _, tc := range []struct {
		name    string
		remove  string
		up      []string
		removed []string
		err     string
		is      error
	}{
		{name: "a lost member, two of three answer", remove: "cp-2", up: []string{cp1, cp3}, removed: []string{"ffffffffffffffc5"}},
		{name: "a member that answers is not lost", remove: "cp-2", up: []string{cp1, cp2, cp3}, err: "etcd member cp-2 answers at " + cp2},
		{name: "quorum lost", remove: "cp-2", up: []string{cp1}, err: "1 of 3 members answer, a membership change needs 2", is: ErrQuorumLost},
		{name: "no such member", remove: "cp-9", up: []string{cp1, cp3}, err: "no etcd member is named cp-9 (members: cp-1, cp-2, cp-3)"},
		{name: "this node", remove: "cp-1", up: []string{cp3}, err: "cp-1 is this node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEtcdctl{list: memberList, up: map[string]bool{}}
			for _, u := range tc.up {
				f.up[u] = true
			}
			m, err := Remove(context.Background(), fakeHost(t, f), tc.remove, "cp-1")
			assert.Equal(t, tc.removed, f.removed, "members removed")
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				if tc.is != nil {
					assert.ErrorIs(t, err, tc.is)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.remove, m.Name)
		})
	}
}

func TestRemoveFailsWhenEtcdctlDoes(t *testing.T) {
	f := &fakeEtcdctl{list: "Error: context deadline exceeded", up: map[string]bool{}}
	_, err := Remove(context.Background(), fakeHost(t, f), "cp-2", "cp-1")
	assert.ErrorContains(t, err, "list etcd members")
	assert.Empty(t, f.removed)
}

func TestHealthyNeedsAClientURL(t *testing.T) {
	f := &fakeEtcdctl{up: map[string]bool{"": true}}
	assert.False(t, Healthy(context.Background(), fakeHost(t, f), Member{ID: 1}), "a member not started")
}
