package upgraderequests

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/controller/controllertest"
)

// requests is one waiting request (or an error) and the answers given.
type requests struct {
	req     *nodestate.UpgradeRequest
	err     error
	answers []nodestate.UpgradeResult
}

func (r *requests) TakeUpgradeRequest() (nodestate.UpgradeRequest, error) {
	if r.err != nil {
		err := r.err
		r.err = nil
		return nodestate.UpgradeRequest{ID: "bad-1"}, err
	}
	if r.req == nil {
		return nodestate.UpgradeRequest{}, nodestate.ErrNoUpgradeRequest
	}
	req := *r.req
	r.req = nil
	return req, nil
}

func (r *requests) AnswerUpgradeRequest(res nodestate.UpgradeResult) error {
	r.answers = append(r.answers, res)
	return nil
}

// installer answers outcome and records what it was asked, and how
// many answers were written when it rebooted.
type installer struct {
	outcome       string
	asked         []string
	reboots       int
	rq            *requests
	answeredFirst []int
}

func (i *installer) FromRequest(_ context.Context, _ *machineconfig.Config, path string, force, reboot bool) nodestate.UpgradeResult {
	i.asked = append(i.asked, fmt.Sprintf("%s force=%t reboot=%t", path, force, reboot))
	return nodestate.UpgradeResult{Outcome: i.outcome, Detail: "what became of it"}
}

func (i *installer) Reboot(context.Context) {
	i.reboots++
	i.answeredFirst = append(i.answeredFirst, len(i.rq.answers))
}

func newController() (*Controller, *requests, *installer, *controllertest.Reporter) {
	rq, r := &requests{}, &controllertest.Reporter{}
	in := &installer{rq: rq}
	cfg := &machineconfig.Config{Hostname: "n-1"}
	return &Controller{Requests: rq, Config: func() *machineconfig.Config { return cfg }, Changes: &controller.ChangeLock{}, Install: in, Report: r}, rq, in, r
}

// Each request is answered, with its ID, before any reboot; a reboot
// follows an install unless the request said not to.
func TestRequestsAnswered(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      nodestate.UpgradeRequest
		outcome  string
		asked    string
		rebooted int
	}{
		{"installed, rebooted", nodestate.UpgradeRequest{ID: "1", Path: "/tmp/a.upgrade"}, nodestate.OutcomeInstalled, "/tmp/a.upgrade force=false reboot=true", 1},
		{"installed, no reboot asked", nodestate.UpgradeRequest{ID: "2", Path: "/dev/sdb", NoReboot: true}, nodestate.OutcomeInstalled, "/dev/sdb force=false reboot=false", 0},
		{"forced, refused", nodestate.UpgradeRequest{ID: "3", Path: "/tmp/b.upgrade", Force: true}, nodestate.OutcomeRefused, "/tmp/b.upgrade force=true reboot=true", 0},
		{"published to the rollout", nodestate.UpgradeRequest{ID: "4", Path: "/tmp/c.upgrade"}, nodestate.OutcomePublished, "/tmp/c.upgrade force=false reboot=true", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rq, in, _ := newController()
			rq.req, in.outcome = &tc.req, tc.outcome
			require.NoError(t, c.Reconcile(context.Background()))
			require.NoError(t, c.Reconcile(context.Background()))
			assert.Equal(t, []string{tc.asked}, in.asked, "taken once")
			assert.Equal(t, []nodestate.UpgradeResult{{ID: tc.req.ID, Outcome: tc.outcome, Detail: "what became of it"}}, rq.answers)
			assert.Equal(t, tc.rebooted, in.reboots)
			for _, n := range in.answeredFirst {
				assert.Equal(t, 1, n, "answered before the reboot")
			}
		})
	}
}

// A request that cannot be read is answered refused, nothing installed.
func TestBadRequestRefused(t *testing.T) {
	c, rq, in, r := newController()
	rq.err = fmt.Errorf("%w: not JSON", nodestate.ErrBadUpgradeRequest)
	require.NoError(t, c.Reconcile(context.Background()))
	assert.Empty(t, in.asked)
	require.Len(t, rq.answers, 1)
	assert.Equal(t, nodestate.OutcomeRefused, rq.answers[0].Outcome)
	assert.Equal(t, "bad-1", rq.answers[0].ID)
	assert.Contains(t, r.Console(), "not JSON")
	assert.Contains(t, r.Console(), "nothing was written")
}
