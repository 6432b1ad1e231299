package timesync

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

var (
	builtAt  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	caIssued = time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
)

// fakeNode is a host with a settable clock and a chronyc whose answer the
// test sets; it records the programs run.
type fakeNode struct {
	mu       sync.Mutex
	now      time.Time
	tracking []string // successive answers of chronyc -c tracking
	cmds     []string
	reports  []string
}

func (f *fakeNode) Exec(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, strings.Join(append([]string{name}, args...), " "))
	switch name {
	case "date":
		// date --utc --set @SECONDS
		s, err := strconv.ParseInt(strings.TrimPrefix(args[len(args)-1], "@"), 10, 64)
		if err != nil {
			return nil, err
		}
		f.now = time.Unix(s, 0)
	case "chronyc":
		if len(f.tracking) == 0 {
			return []byte("506 Cannot talk to daemon\n"), errors.New("exit status 1")
		}
		out := f.tracking[0]
		if len(f.tracking) > 1 {
			f.tracking = f.tracking[1:]
		}
		return []byte(out), nil
	}
	return nil, nil
}

func (f *fakeNode) Report(name string, result step.Result, detail string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, name+": "+string(result)+": "+detail)
}

func (f *fakeNode) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func newNode(t *testing.T, now time.Time) (*host.Host, *fakeNode) {
	t.Helper()
	f := &fakeNode{now: now}
	h := &host.Host{Root: t.TempDir(), Executor: f, Clock: f}
	rel, err := json.Marshal(map[string]any{"name": "terrarium", "version": "0.1.0", "suite": "trixie", "kernelVersion": "6.12", "builtAt": builtAt.Format(time.RFC3339)})
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(h.Path(layout.ReleaseFile)), 0o755))
	require.NoError(t, os.WriteFile(h.Path(layout.ReleaseFile), rel, 0o644))
	require.NoError(t, os.MkdirAll(h.Path("/usr/sbin"), 0o755))
	require.NoError(t, os.WriteFile(h.Path(daemon), nil, 0o755))
	return h, f
}

func caPEM(t *testing.T, notBefore time.Time) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: notBefore, NotAfter: notBefore.Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func clusterNode(t *testing.T, role, ip string) *machineconfig.Config {
	return &machineconfig.Config{
		Hostname: "n",
		Network:  machineconfig.Network{Interfaces: []machineconfig.Interface{{Name: "en*", Addresses: []string{ip + "/24"}}}},
		Cluster: &machineconfig.Cluster{Role: role, NodeIP: ip, ControlPlanes: []string{"10.77.0.10", "10.77.0.11", "10.77.0.12"},
			CACert: caPEM(t, caIssued)},
	}
}

func TestConf(t *testing.T) {
	init := Conf(clusterNode(t, machineconfig.RoleInit, "10.77.0.10"))
	assert.Contains(t, init, "local stratum 8\n")
	assert.Empty(t, sortedServers(init), "the init node follows nothing")
	assert.NotContains(t, init, "makestep", "the init node is never stepped")
	assert.Contains(t, init, "bindaddress 10.77.0.10\nallow 10.77.0.0/24\n")

	cp := Conf(clusterNode(t, machineconfig.RoleControlPlane, "10.77.0.11"))
	assert.Equal(t, []string{"10.77.0.10", "10.77.0.12"}, sortedServers(cp))
	assert.Contains(t, cp, "local stratum 10 orphan\n")
	assert.Contains(t, cp, "makestep 1 3\n")
	assert.Contains(t, cp, "allow 10.77.0.0/24\n")
	assert.Contains(t, cp, "server 10.77.0.10 iburst minpoll 4 maxpoll 6 trust prefer\n", "the init node is the reference")
	assert.Contains(t, cp, "server 10.77.0.12 iburst minpoll 4 maxpoll 6\n")

	w := Conf(clusterNode(t, machineconfig.RoleWorker, "10.77.0.20"))
	assert.Equal(t, []string{"10.77.0.10", "10.77.0.11", "10.77.0.12"}, sortedServers(w))
	assert.Contains(t, w, "port 0\n", "a worker serves nothing")
	assert.Equal(t, 1, strings.Count(w, " trust prefer\n"), "only the init node is trusted")
	assert.NotContains(t, w, "allow")

	alone := Conf(&machineconfig.Config{Hostname: "n"})
	assert.Empty(t, sortedServers(alone))
	assert.Contains(t, alone, "port 0\n")

	for _, c := range []string{init, cp, w, alone} {
		for _, l := range strings.Split(c, "\n") {
			assert.False(t, strings.HasPrefix(l, "pool ") || strings.HasPrefix(l, "sourcedir "), "no source outside the cluster: %q", l)
		}
	}
}

func TestFloor(t *testing.T) {
	h, _ := newNode(t, time.Now())
	assert.Equal(t, Known{At: builtAt, What: "this image's build time"}, Floor(h, &machineconfig.Config{}))
	k := Floor(h, clusterNode(t, machineconfig.RoleWorker, "10.77.0.20"))
	assert.Equal(t, caIssued, k.At.UTC(), "the cluster CA's issue time, later")
	assert.Equal(t, "the cluster CA's issue time", k.What)
}

// A node whose RTC reads 1970 is stepped forward to the latest time it
// knows before anything else, and says so; verify finds it behind first.
func TestClockBehindIsSteppedForward(t *testing.T) {
	h, f := newNode(t, time.Unix(0, 0))
	c := clusterNode(t, machineconfig.RoleInit, "10.77.0.10")
	p := Phase(h, Sync{Wait: time.Second, Every: time.Millisecond}, f)
	err := p.Verify(context.Background(), c)
	require.ErrorIs(t, err, errBehind)
	assert.Contains(t, err.Error(), "1970-01-01T00:00:00Z")

	require.NoError(t, p.Apply(context.Background(), c))
	assert.Equal(t, caIssued, f.Now().UTC())
	require.NotEmpty(t, f.cmds)
	assert.Equal(t, "date --utc --set @"+strconv.FormatInt(caIssued.Unix(), 10), f.cmds[0], "stepped before anything else")
	assert.Contains(t, f.cmds, "systemctl restart chrony.service")
	require.Len(t, f.reports, 1)
	assert.Contains(t, f.reports[0], "time: stepped: the clock read 1970-01-01T00:00:00Z, before the cluster CA's issue time")
	assert.Contains(t, f.reports[0], "stepped forward to 2026-11-20T08:00:00Z")
	require.NoError(t, p.Verify(context.Background(), c))

	// Nothing changed: applied again, nothing runs.
	f.cmds = nil
	require.NoError(t, p.Apply(context.Background(), c))
	assert.Empty(t, f.cmds)
}

// A flat battery's RTC reads 1970 (systemd has already moved the system
// clock forward to its own build time) or, through UEFI firmware, 2070
// (systemd has moved it back to that time): the step says what the
// hardware clock read too. One within a minute of the system clock is not
// mentioned.
func TestSteppedClockNamesTheHardwareClock(t *testing.T) {
	systemdEpoch := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, rtc, want string
	}{
		{"RTC in 1970", "0\n", "the clock read 2025-05-01T00:00:00Z (the hardware clock read 1970-01-01T00:00:00Z), before the cluster CA's issue time"},
		// UEFI firmware with a two-digit CMOS year reads 1970 as 2070;
		// systemd sets a clock that far ahead back to its build time.
		{"RTC decades ahead", strconv.FormatInt(time.Date(2070, 1, 1, 0, 0, 7, 0, time.UTC).Unix(), 10) + "\n", "the clock read 2025-05-01T00:00:00Z (the hardware clock read 2070-01-01T00:00:07Z), before the cluster CA's issue time"},
		{"RTC as the system clock", strconv.FormatInt(systemdEpoch.Unix(), 10) + "\n", "the clock read 2025-05-01T00:00:00Z, before the cluster CA's issue time"},
		{"RTC within a minute", strconv.FormatInt(systemdEpoch.Add(50*time.Second).Unix(), 10) + "\n", "the clock read 2025-05-01T00:00:00Z, before the cluster CA's issue time"},
		{"no RTC", "", "the clock read 2025-05-01T00:00:00Z, before the cluster CA's issue time"},
		{"an unreadable RTC", "soon\n", "the clock read 2025-05-01T00:00:00Z, before the cluster CA's issue time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, f := newNode(t, systemdEpoch)
			if tc.rtc != "" {
				require.NoError(t, os.MkdirAll(filepath.Dir(h.Path(rtcSinceEpoch)), 0o755))
				require.NoError(t, os.WriteFile(h.Path(rtcSinceEpoch), []byte(tc.rtc), 0o444))
			}
			c := clusterNode(t, machineconfig.RoleInit, "10.77.0.10")
			require.NoError(t, Phase(h, Sync{Wait: time.Second, Every: time.Millisecond}, f).Apply(context.Background(), c))
			require.NotEmpty(t, f.reports)
			assert.Contains(t, f.reports[0], "time: stepped: "+tc.want)
		})
	}
}

// A clock ahead of the floor is never stepped by firstboot (the init
// node's clock is the reference).
func TestClockAheadIsKept(t *testing.T) {
	ahead := time.Date(2031, 5, 1, 0, 0, 0, 0, time.UTC)
	h, f := newNode(t, ahead)
	p := Phase(h, Sync{Wait: time.Second, Every: time.Millisecond}, f)
	require.NoError(t, p.Apply(context.Background(), clusterNode(t, machineconfig.RoleInit, "10.77.0.10")))
	assert.Equal(t, ahead, f.Now())
	for _, c := range f.cmds {
		assert.NotContains(t, c, "date")
	}
}

// A worker waits for its first time from the control planes in "time
// synced", before its cluster steps that check certificates, reporting the
// wait and the source it got; its time phase only sets chrony up. A
// joining control plane waits in its time phase: its registry certificate
// is issued next.
func TestFollowerWaitsForSync(t *testing.T) {
	synced := []string{
		"00000000,,0,0.000000000,0.000000000,0.000000000,0.000000000,0.000,0.000,0.000,1.000000000,1.000000000,0.0,Not synchronised\n",
		"0A4D000A,10.77.0.10,9,1764144000.123456789,-0.000012000,0.000003000,0.000010000,-1.500,0.001,0.100,0.000500000,0.000100000,16.2,Normal\n",
	}
	sync := Sync{Wait: time.Minute, Every: time.Millisecond}
	for _, tc := range []struct {
		role     string
		waitedIn string // the phase that waits
	}{
		{machineconfig.RoleWorker, "time synced"},
		{machineconfig.RoleControlPlane, "time"},
	} {
		t.Run(tc.role, func(t *testing.T) {
			h, f := newNode(t, time.Now())
			f.tracking = slices.Clone(synced)
			c := clusterNode(t, tc.role, "10.77.0.20")
			for _, p := range []phase.Phase{Phase(h, sync, f), SyncedPhase(h, sync, f)} {
				require.NoError(t, p.Apply(context.Background(), c))
				if p.Name != tc.waitedIn {
					assert.Empty(t, f.reports, "%s: no wait", p.Name)
					continue
				}
				require.Len(t, f.reports, 2, p.Name)
				assert.Contains(t, f.reports[0], "time: waiting: for the control planes' time")
				assert.Equal(t, "time: synced: 10.77.0.10 (stratum 9), offset -0.000012 s", f.reports[1])
				f.reports = nil
			}
			b, err := os.ReadFile(h.Path(ConfFile))
			require.NoError(t, err)
			assert.Contains(t, string(b), "server 10.77.0.10 iburst")
		})
	}

	// No answer within the wait: a named error.
	h, f := newNode(t, time.Now())
	p := SyncedPhase(h, Sync{Wait: 5 * time.Millisecond, Every: time.Millisecond}, f)
	err := p.Apply(context.Background(), clusterNode(t, machineconfig.RoleWorker, "10.77.0.20"))
	assert.ErrorContains(t, err, "no time from the control planes")

	// The init node is the reference: it waits for nobody.
	h, f = newNode(t, time.Now())
	require.NoError(t, SyncedPhase(h, sync, f).Apply(context.Background(), clusterNode(t, machineconfig.RoleInit, "10.77.0.10")))
	assert.Empty(t, f.reports)
}

func TestParseTracking(t *testing.T) {
	tr, err := ParseTracking("7F7F0101,,8,1764144000.000000000,0.000000000,0.000000000,0.000000000,0.000,0.000,0.000,0.000000000,0.000000000,64.0,Normal\n")
	require.NoError(t, err)
	assert.False(t, tr.Synced(), "its own clock is no source")
	assert.Equal(t, "local clock (the cluster's reference, stratum 8)", tr.String())
	for _, bad := range []string{"", "a,b,c", "0A4D000A,10.77.0.10,x,1,2,3,4,5,6,7,8,9,10,Normal", "0A4D000A,10.77.0.10,9,1,y,3,4,5,6,7,8,9,10,Normal"} {
		_, err := ParseTracking(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func FuzzParseTracking(f *testing.F) {
	f.Add("0A4D000A,10.77.0.10,9,1764144000.123456789,-0.000012000,0.000003000,0.000010000,-1.500,0.001,0.100,0.000500000,0.000100000,16.2,Normal\n")
	f.Add("7F7F0101,,8,0,0,0,0,0,0,0,0,0,64.0,Normal")
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ParseTracking(s)
		if err == nil {
			_ = tr.String()
		}
	})
}

// sortedServers are the servers a chrony configuration names, sorted.
func sortedServers(conf string) []string {
	var out []string
	for _, l := range strings.Split(conf, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "server" {
			out = append(out, f[1])
		}
	}
	sort.Strings(out)
	return out
}

// An image without chrony keeps its clock (after the step to the floor):
// nothing written, nothing restarted, nothing waited for.
func TestNoChrony(t *testing.T) {
	h, f := newNode(t, time.Now())
	require.NoError(t, os.Remove(h.Path(daemon)))
	p := Phase(h, Sync{Wait: time.Millisecond, Every: time.Millisecond}, f)
	c := clusterNode(t, machineconfig.RoleWorker, "10.77.0.20")
	require.NoError(t, p.Apply(context.Background(), c))
	assert.Empty(t, f.cmds)
	assert.NoFileExists(t, h.Path(ConfFile))
	require.Len(t, f.reports, 1)
	assert.Contains(t, f.reports[0], "time: skipped: this image has no chrony")
	assert.NoError(t, p.Verify(context.Background(), c))

	_, err := Track(context.Background(), h)
	assert.ErrorIs(t, err, ErrNoChrony, "nobody to ask")
	assert.Empty(t, f.cmds, "chronyc is not run")
}

// chrony's unit in the image starts at boot only once the phase has
// written the file it names: on a first boot the phase starts it.
func TestChronyStartsOnceItsSourcesAreWritten(t *testing.T) {
	unit, err := os.ReadFile("../../../../os/overlay/etc/systemd/system/chrony.service.d/terrarium.conf")
	require.NoError(t, err)
	var conditions []string
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ConditionPathExists="); ok {
			conditions = append(conditions, v)
		}
	}
	assert.Equal(t, []string{ConfFile}, conditions)
	assert.Equal(t, "chrony.service", service, "the drop-in's directory names the unit the phase restarts")
}
