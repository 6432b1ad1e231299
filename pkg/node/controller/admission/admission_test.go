package admission

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// Each look admits with the config the node runs then, and reports what
// the admission returned.
func TestAdmitsWithTheRunningConfig(t *testing.T) {
	cfg := &machineconfig.Config{Hostname: "cp-1"}
	var got []*machineconfig.Config
	failed := errors.New("the API does not answer")
	c := &Controller{Config: func() *machineconfig.Config { return cfg }, Admit: func(_ context.Context, c *machineconfig.Config) error {
		got = append(got, c)
		return failed
	}}
	assert.ErrorIs(t, c.Reconcile(context.Background()), failed)
	changed := &machineconfig.Config{Hostname: "cp-1b"}
	cfg = changed
	assert.ErrorIs(t, c.Reconcile(context.Background()), failed)
	assert.Equal(t, []*machineconfig.Config{{Hostname: "cp-1"}, changed}, got)
	assert.Equal(t, "node-admission", c.Name())
}
