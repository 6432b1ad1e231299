package configchange

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// fakeNode offers what offer holds and records what the controller asks.
type fakeNode struct {
	offer  Offer
	take   bool
	locked func() bool
	judged []string
	checks []string
	pubs   int
}

func (f *fakeNode) Look(context.Context) Offer { return f.offer }

func (f *fakeNode) Take(_ context.Context, running *machineconfig.Config, o Offer) (*machineconfig.Config, bool) {
	if !f.locked() {
		panic("judged without the change lock")
	}
	f.judged = append(f.judged, running.Hostname+"<-"+string(o.Found.Config))
	if !f.take {
		return running, false
	}
	return &machineconfig.Config{Hostname: string(o.Found.Config)}, true
}

func (f *fakeNode) Check(_ context.Context, cfg *machineconfig.Config) {
	f.checks = append(f.checks, cfg.Hostname)
}

func (f *fakeNode) Publish() { f.pubs++ }

// lock is a change lock that says whether it is held.
type lock struct {
	mu   sync.Mutex
	held bool
	what []string
}

func (l *lock) Hold(what string) { l.mu.Lock(); l.held = true; l.what = append(l.what, what) }
func (l *lock) Unlock()          { l.held = false; l.mu.Unlock() }

func stick(config string) Offer {
	return Offer{Found: &configsource.Found{Source: "/dev/disk/by-label/TERRA-CONFIG", Config: []byte(config), Signature: []byte("sig")}}
}

func newController(node *fakeNode, seen string) (*Controller, *lock, *machineconfig.Config) {
	l := &lock{}
	node.locked = func() bool { return l.held }
	running := &machineconfig.Config{Hostname: "node-1"}
	c := &Controller{Node: node, Changes: l, Seen: seen, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Config: func() *machineconfig.Config { return running }}
	c.SetConfig = func(cfg *machineconfig.Config) { running = cfg }
	return c, l, running
}

func TestOfferJudgedOnce(t *testing.T) {
	node := &fakeNode{offer: stick("node-2"), take: false}
	c, l, _ := newController(node, "")
	ctx := context.Background()
	for range 3 {
		require.NoError(t, c.Reconcile(ctx))
	}
	assert.Equal(t, []string{"node-1<-node-2"}, node.judged, "the same stick is judged once")
	assert.Equal(t, 1, node.pubs, "a refusal is published")
	assert.Empty(t, node.checks, "nothing taken, nothing checked")
	assert.Equal(t, []string{"the config change"}, l.what)

	node.offer = Offer{}
	require.NoError(t, c.Reconcile(ctx))
	assert.Len(t, node.judged, 1, "a pulled stick is not judged")

	node.offer = stick("node-2")
	require.NoError(t, c.Reconcile(ctx))
	assert.Len(t, node.judged, 2, "the stick inserted again is judged again")
}

func TestBootsOfferIsNotJudgedAgain(t *testing.T) {
	node := &fakeNode{offer: stick("node-2"), take: true}
	c, _, _ := newController(node, stick("node-2").Fingerprint())
	require.NoError(t, c.Reconcile(context.Background()))
	assert.Empty(t, node.judged, "the boot judged this stick")
	assert.Zero(t, node.pubs)
}

func TestChangeTakenBecomesTheRunningConfig(t *testing.T) {
	node := &fakeNode{offer: stick("node-2"), take: true}
	c, l, _ := newController(node, "")
	require.NoError(t, c.Reconcile(context.Background()))
	assert.Equal(t, "node-2", c.Config().Hostname)
	assert.Equal(t, []string{"node-2"}, node.checks, "the health check follows, on the new config")
	assert.Equal(t, 1, node.pubs)
	assert.False(t, l.held, "the lock is let go")

	node.offer = stick("node-3")
	require.NoError(t, c.Reconcile(context.Background()))
	assert.Equal(t, []string{"node-1<-node-2", "node-2<-node-3"}, node.judged, "the next change is judged against the one taken")
}

func TestFingerprint(t *testing.T) {
	unreadable := Offer{Err: errors.New("bad FAT")}
	fps := map[string]Offer{}
	for _, o := range []Offer{{}, stick("a"), stick("b"), unreadable,
		{Found: &configsource.Found{Source: "/dev/sr0", Config: []byte("a"), Signature: []byte("sig")}},
		{Found: &configsource.Found{Source: "/dev/disk/by-label/TERRA-CONFIG", Config: []byte("a"), Signature: []byte("other")}},
	} {
		fp := o.Fingerprint()
		_, dup := fps[fp]
		assert.False(t, dup, "%+v shares a fingerprint", o)
		fps[fp] = o
	}
	assert.Equal(t, stick("a").Fingerprint(), stick("a").Fingerprint())
}
