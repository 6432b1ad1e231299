// Package controllertest holds the fakes the controllers' tests share: a
// Reporter that keeps what it was told, and media a test inserts and
// pulls.
package controllertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Reporter keeps the console's lines and the journal's steps.
type Reporter struct {
	mu    sync.Mutex
	lines []string
	steps []string
}

var _ controller.Reporter = (*Reporter)(nil)

// Say implements controller.Reporter.
func (r *Reporter) Say(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

// Note implements controller.Reporter.
func (r *Reporter) Note(name string, result step.Result, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, name+"="+string(result)+": "+detail)
}

// Console is every line said, one per line.
func (r *Reporter) Console() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// Steps are the steps noted, each "NAME=RESULT: DETAIL".
func (r *Reporter) Steps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.steps...)
}

// Media is one USB port: a stick inserted is a directory on the test's
// host; Use hands the controller that directory (Dir, a path on Host,
// made when used) or fails with UseErr.
type Media struct {
	mu     sync.Mutex
	stick  *media.Medium
	seq    int
	Host   *host.Host
	Dir    string
	UseErr error
	// Uses counts the sticks used.
	Uses int
}

var _ media.Media = (*Media)(nil)

// Insert puts a new stick labelled label in, as device.
func (m *Media) Insert(label, device string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	m.stick = &media.Medium{Device: device, Label: label, Insertion: fmt.Sprintf("%s#%d", device, m.seq)}
}

// Pull takes the stick out.
func (m *Media) Pull() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stick = nil
}

// Find implements media.Media.
func (m *Media) Find(labels ...string) (media.Medium, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stick == nil {
		return media.Medium{}, false
	}
	for _, l := range labels {
		if l == m.stick.Label {
			return *m.stick, true
		}
	}
	return media.Medium{}, false
}

// Use implements media.Media.
func (m *Media) Use(ctx context.Context, md media.Medium, writable bool, fn func(dir string) error) error {
	m.mu.Lock()
	m.Uses++
	useErr, dir := m.UseErr, m.Dir
	m.mu.Unlock()
	if useErr != nil {
		return useErr
	}
	if !writable {
		return errors.New("controllertest: the stick is used read-only")
	}
	if err := os.MkdirAll(m.Host.Path(dir), 0o700); err != nil {
		return err
	}
	return fn(dir)
}

// Now is the clock of Host's machines.
var Now = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// Host is a machine at a temporary root whose clock reads Now and which
// runs no program (each fails, naming itself).
func Host(t *testing.T) *host.Host {
	t.Helper()
	return &host.Host{Root: t.TempDir(), Clock: host.ClockFunc(func() time.Time { return Now }),
		Executor: host.ExecFunc(func(_ context.Context, name string, _ ...string) ([]byte, error) {
			return nil, errors.New(name + ": not on this test host")
		})}
}
