package slotinstall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

var errPowerCut = errors.New("power cut")

// powerCut cuts the power before write number at (counting from 0): that
// write and every one after it fail, as nothing runs once the machine is
// off. It records every write it let through.
type powerCut struct {
	at   int
	done []string
}

func (p *powerCut) cut(op string) error {
	if len(p.done) >= p.at {
		return errPowerCut
	}
	p.done = append(p.done, op)
	return nil
}

// TestPowerCut cuts the power before each of Install's writes in turn, on
// nodes in several states, and checks that the node still boots a slot
// that holds its build completely (the running one, or a complete,
// counted new one), never a half-written one, and that Install run again
// completes the upgrade.
func TestPowerCut(t *testing.T) {
	v1, v2, v3 := newBuild("0.1.0"), newBuild("0.2.0"), newBuild("0.2.1")
	nodes := []struct {
		name    string
		node    func(t *testing.T) *node
		install build
	}{
		{"fresh image", func(t *testing.T) *node { return image(t, v1) }, v2},
		{"image with slot B", func(t *testing.T) *node { return image(t, v1).withSlotB(3) }, v2},
		{"upgrade pending", func(t *testing.T) *node {
			n := image(t, v1)
			_, err := n.install(v2)
			require.NoError(t, err)
			return n
		}, v3},
		{"upgrade failed", func(t *testing.T) *node {
			n := image(t, v1)
			_, err := n.install(v2)
			require.NoError(t, err)
			n.failTrial(n.running.Other())
			return n
		}, v3},
		{"upgraded and blessed", func(t *testing.T) *node {
			n := image(t, v1)
			_, err := n.install(v2)
			require.NoError(t, err)
			n.bootAndBless()
			return n
		}, v3},
	}
	for _, tn := range nodes {
		t.Run(tn.name, func(t *testing.T) {
			// A run without a cut counts the writes.
			all := &powerCut{at: 1 << 30}
			n := tn.node(t)
			_, err := install(context.Background(), n.options(tn.install.verified(t)), ops{cut: all.cut})
			require.NoError(t, err)
			require.Greater(t, len(all.done), 10)

			for at := range all.done {
				t.Run(fmt.Sprintf("before %d %s", at, opName(all.done[at])), func(t *testing.T) {
					n := tn.node(t)
					running := n.running
					runningEntry := n.read(n.entryOf(running).path())
					n.builds[tn.install.version] = tn.install
					v := tn.install.verified(t)

					_, err := install(context.Background(), n.options(v), ops{cut: (&powerCut{at: at}).cut})
					require.ErrorIs(t, err, errPowerCut)

					// The machine boots again: a slot holding its build whole.
					next := n.requireBootable()
					assert.Equal(t, runningEntry, n.read(n.entryOf(running).path()), "the running slot's entry is intact")
					if next.name.slot != running {
						assert.True(t, next.name.counted && !next.name.bad(), "a new slot boots on trial: %s", next.name.file)
					}

					// The upgrade is retried, and completes.
					res, err := Install(context.Background(), n.options(v))
					if err != nil {
						require.ErrorIs(t, err, upgrade.ErrAlreadyInstalled, "only a cut after the commit leaves it installed")
						require.Equal(t, len(all.done)-1, at, "only the last write follows the commit")
					}
					next = n.requireBootable()
					assert.Equal(t, res.Entry, next.path())
					assert.Equal(t, tn.install.version, next.version)
					assert.True(t, n.slotHolds(running.Other(), tn.install))
					assert.Empty(t, n.leftovers())
					assert.Len(t, n.entries(), 2, "one entry per slot")
					n.failTrial(running.Other())
					assert.Equal(t, n.entryOf(running).path(), n.nextBoot().path(), "a failing new slot falls back to the running one")
					assert.Equal(t, runningEntry, n.read(n.entryOf(running).path()))
				})
			}
		})
	}
}

// opName shortens a write's name for a test name: its verb and file.
func opName(op string) string {
	verb, p, _ := strings.Cut(op, " ")
	return verb + " " + p[strings.LastIndex(p, "/")+1:]
}
