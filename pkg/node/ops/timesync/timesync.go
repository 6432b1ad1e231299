// Package timesync keeps an air-gapped node's time without a time source
// outside its cluster. The control planes serve NTP (chrony) on the cluster
// network and the other nodes follow them; the init node's clock is the
// cluster's reference and follows nothing, so chrony never steps it (nor
// backwards under its etcd). Before anything issues or checks a
// certificate, a clock behind the latest time the node knows to have passed
// (the image's build time, the cluster CA's issue time) is stepped forward
// to it, and the console says so.
package timesync

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// ConfFile is the chrony configuration the phase writes; the image's
// /etc/chrony/chrony.conf reads it (confdir) and names no other source.
const ConfFile = "/etc/chrony/conf.d/terrarium.conf"

// service is chrony's unit, and daemon its program: an image built
// without chrony keeps its clock as it is (after the step to the floor).
const (
	service = "chrony.service"
	daemon  = "/usr/sbin/chronyd"
)

// hasChrony reports whether the image carries chrony.
func hasChrony(h *host.Host) bool {
	_, err := os.Stat(h.Path(daemon))
	return err == nil
}

// Sync is how long a following node waits for its first time from the
// control planes, and how often it asks meanwhile.
type Sync struct {
	Wait  time.Duration
	Every time.Duration
}

// DefaultSync waits as long as a joiner waits for the API: the control
// planes may boot after it.
func DefaultSync() Sync { return Sync{Wait: 30 * time.Minute, Every: 2 * time.Second} }

// Phase is the time phase on a host. report hears what it did to the clock
// and what it waits for.
func Phase(h *host.Host, sync Sync, report host.Reporter) phase.Phase {
	t := &timePhase{h: h, sync: sync, report: report}
	return phase.Phase{Name: "time", Apply: t.apply, Verify: t.verify}
}

// SyncedPhase is where a worker waits for its first time from the control
// planes ("time synced"): just before its cluster step that checks a
// certificate (the API's), not in the time phase. What it does before
// (its registry's files, the kernel's switches) needs no true time and, on
// a worker starved beside the init node, would wait as long as chrony
// takes to follow (make bench-cluster, docs/benchmarks.md).
// Control planes wait in the time phase: a joiner issues its registry
// certificate next.
func SyncedPhase(h *host.Host, sync Sync, report host.Reporter) phase.Phase {
	t := &timePhase{h: h, sync: sync, report: report}
	return phase.Phase{Name: "time synced", Apply: t.applySynced, Verify: func(context.Context, *machineconfig.Config) error { return nil }}
}

// waitsLater reports whether c's node waits for its time in SyncedPhase:
// a worker of a cluster.
func waitsLater(c *machineconfig.Config) bool {
	return c.Cluster != nil && c.Cluster.Role == machineconfig.RoleWorker
}

func (t *timePhase) applySynced(ctx context.Context, c *machineconfig.Config) error {
	if !waitsLater(c) || !hasChrony(t.h) {
		return nil
	}
	return t.waitForSync(ctx)
}

type timePhase struct {
	h      *host.Host
	sync   Sync
	report host.Reporter
}

// Conf renders chrony's configuration for a node.
func Conf(c *machineconfig.Config) string {
	var b strings.Builder
	b.WriteString("# Written by Terrarium firstboot from the machine config (pkg/node/ops/timesync).\n")
	b.WriteString("# No pool and no DHCP-given server: an air-gapped node's time comes from\n# its cluster's control planes.\n")
	cl := c.Cluster
	if cl == nil {
		b.WriteString("# A standalone node keeps its own clock: no source, nothing served.\nport 0\n")
		return b.String()
	}
	role := cl.Role
	var servers []string
	switch role {
	case machineconfig.RoleInit:
		b.WriteString("# The init node's clock is the cluster's reference: it follows nothing,\n# so it is never stepped.\n")
		b.WriteString("local stratum 8\n")
	case machineconfig.RoleControlPlane:
		servers = others(cl.ControlPlanes, cl.NodeIP)
		b.WriteString("# Follows the other control planes; without them, the control planes\n# agree among themselves (orphan mode).\n")
		b.WriteString("local stratum 10 orphan\n")
	default:
		servers = others(cl.ControlPlanes, cl.NodeIP)
	}
	for _, s := range servers {
		// The init node's clock is the reference: trusted, a source
		// that disagrees with it is the falseticker. Without it two
		// control planes that disagree leave a follower with no
		// source it can select.
		opts := ""
		if s == cl.ControlPlanes[0] {
			opts = " trust prefer"
		}
		fmt.Fprintf(&b, "server %s iburst minpoll 4 maxpoll 6%s\n", s, opts)
	}
	if len(servers) > 0 {
		// A clock far off (a flat RTC battery) is stepped, but only in
		// chrony's first updates, before the node's own services depend
		// on it; after that it is slewed.
		b.WriteString("makestep 1 3\n")
	}
	if cl.IsControlPlane() {
		if subnet := clusterSubnet(c); subnet != "" {
			fmt.Fprintf(&b, "# Serves NTP on the cluster network only.\nbindaddress %s\nallow %s\n", cl.NodeIP, subnet)
		}
	} else {
		b.WriteString("port 0\n")
	}
	return b.String()
}

// others are the control planes but this node, sorted as given.
func others(cps []string, self string) []string {
	var out []string
	for _, ip := range cps {
		if ip != self {
			out = append(out, ip)
		}
	}
	return out
}

// clusterSubnet is the subnet of the node's address on the cluster
// network, "" when no interface holds it.
func clusterSubnet(c *machineconfig.Config) string {
	for _, ifc := range c.Network.Interfaces {
		for _, a := range ifc.Addresses {
			p, err := netip.ParsePrefix(a)
			if err == nil && p.Addr().String() == c.Cluster.NodeIP {
				return p.Masked().String()
			}
		}
	}
	return ""
}

// Known is a time the node knows to have passed, and what says so.
type Known struct {
	At   time.Time
	What string
}

// Later is the later of k and o.
func (k Known) Later(o Known) Known {
	if o.At.After(k.At) {
		return o
	}
	return k
}

// Floor is the latest time the node knows to have passed from its image
// and config: the image's build time and, on a cluster node, the cluster
// CA's issue time (c may be nil: no config yet). Zero when it knows none.
func Floor(h *host.Host, c *machineconfig.Config) Known {
	var k Known
	if rel, err := release.Load(h.Path(layout.ReleaseFile)); err == nil {
		if t, err := time.Parse(time.RFC3339, rel.BuiltAt); err == nil {
			k = k.Later(Known{At: t, What: "this image's build time"})
		}
	}
	if at, ok := CAIssued(c); ok {
		k = k.Later(Known{At: at, What: "the cluster CA's issue time"})
	}
	return k
}

// CAIssued is the NotBefore of the cluster CA a config carries; false
// when c (which may be nil) has no cluster or its CA does not parse.
func CAIssued(c *machineconfig.Config) (time.Time, bool) {
	if c == nil || c.Cluster == nil {
		return time.Time{}, false
	}
	b, _ := pem.Decode([]byte(c.Cluster.CACert))
	if b == nil {
		return time.Time{}, false
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return time.Time{}, false
	}
	return ca.NotBefore, true
}

// errBehind: the clock is behind the floor.
var errBehind = errors.New("the clock is behind the latest time this node knows to have passed")

func (t *timePhase) verify(ctx context.Context, c *machineconfig.Config) error {
	if floor, now := Floor(t.h, c), t.h.Now(); now.Before(floor.At) {
		return fmt.Errorf("%w: it reads %s, %s (%s) has passed", errBehind, now.UTC().Format(time.RFC3339), floor.At.UTC().Format(time.RFC3339), floor.What)
	}
	if !hasChrony(t.h) {
		return nil
	}
	return t.h.FilesMatch(map[string]string{ConfFile: Conf(c)})
}

func (t *timePhase) apply(ctx context.Context, c *machineconfig.Config) error {
	if err := StepForward(ctx, t.h, Floor(t.h, c), t.report); err != nil {
		return err
	}
	if !hasChrony(t.h) {
		t.report.Report("time", step.Skipped, "this image has no chrony ("+daemon+"): the node keeps its own clock")
		return nil
	}
	changed, err := t.h.WriteIfChanged(ConfFile, []byte(Conf(c)), 0o644)
	if err != nil {
		return err
	}
	// On a first boot this starts chrony: its unit waits for the file
	// (os/overlay's drop-in).
	if changed {
		if err := t.h.Run(ctx, "systemctl", "restart", service); err != nil {
			return err
		}
	}
	if c.Cluster == nil || c.Cluster.Role == machineconfig.RoleInit || waitsLater(c) {
		return nil
	}
	return t.waitForSync(ctx)
}

// StepForward steps a clock that is behind floor forward to it, keeps the
// hardware clock in step, and reports what it did; a clock at or past the
// floor is left alone. firstboot calls it first thing with the image's
// build time and the last time its node state recorded, so that even the
// enrollment is recorded at a time that can be true.
func StepForward(ctx context.Context, h *host.Host, known Known, report host.Reporter) error {
	now, floor := h.Now(), known.At
	if !now.Before(floor) {
		return nil
	}
	at := "@" + strconv.FormatInt(floor.Unix(), 10)
	if err := h.Run(ctx, "date", "--utc", "--set", at); err != nil {
		return fmt.Errorf("step the clock to %s: %w", floor.UTC().Format(time.RFC3339), err)
	}
	// What the hardware clock read, when it is more than a minute from the
	// system clock: systemd moves a clock before its own build time
	// forward to that time and one decades ahead back to it, so a flat
	// battery's 1970 (which UEFI firmware with a two-digit CMOS year may
	// read as 2070) shows only there. Read before the RTC is set.
	rtc := ""
	if t, ok := hardwareClock(h); ok && (t.Sub(now) > time.Minute || now.Sub(t) > time.Minute) {
		rtc = fmt.Sprintf(" (the hardware clock read %s)", t.UTC().Format(time.RFC3339))
	}
	// Best effort: a VM may have no writable RTC.
	_ = h.Run(ctx, "hwclock", "--systohc", "--utc")
	report.Report("time", step.Stepped, fmt.Sprintf("the clock read %s%s, before %s; stepped forward to %s, the latest time this node knows to have passed",
		now.UTC().Format(time.RFC3339), rtc, known.What, floor.UTC().Format(time.RFC3339)))
	return nil
}

// rtcSinceEpoch is the first hardware clock's reading, in seconds since
// the epoch (UTC).
const rtcSinceEpoch = "/sys/class/rtc/rtc0/since_epoch"

// hardwareClock reads the RTC; false when there is none to read.
func hardwareClock(h *host.Host) (time.Time, bool) {
	b, err := os.ReadFile(h.Path(rtcSinceEpoch))
	if err != nil {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// waitForSync waits until chrony has a source, so that the node's clock
// is the control planes' before it checks or asks for a certificate.
func (t *timePhase) waitForSync(ctx context.Context) error {
	deadline := time.Now().Add(t.sync.Wait)
	for first := true; ; first = false {
		tr, err := Track(ctx, t.h)
		if err == nil && tr.Synced() {
			t.report.Report("time", step.Synced, tr.String())
			return nil
		}
		if err == nil {
			err = errors.New("no control plane answered yet")
		}
		if first {
			t.report.Report("time", step.Waiting, "for the control planes' time: "+err.Error())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no time from the control planes after %s: %w (`chronyc sources`)", t.sync.Wait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(t.sync.Every):
		}
	}
}

// Tracking is what chrony says about the clock (`chronyc -c tracking`).
type Tracking struct {
	// RefID is the reference's id in hex; Source its address or name.
	RefID, Source string
	Stratum       int
	// Offset is how far the system clock is from chrony's idea of true
	// time (positive: fast).
	Offset time.Duration
	// Leap is chrony's leap status: "Normal", or "Not synchronised".
	Leap string
}

// localRefID is chrony's reference id for its own clock ("LOCL").
const localRefID = "7F7F0101"

// Synced reports whether chrony follows a source (not its own clock).
func (t Tracking) Synced() bool {
	return t.Leap != "Not synchronised" && t.RefID != "00000000" && t.RefID != localRefID && t.Stratum > 0
}

// String says it for a person: "10.77.0.10 (stratum 9), offset +0.000012 s".
func (t Tracking) String() string {
	switch {
	case t.RefID == localRefID:
		return fmt.Sprintf("local clock (the cluster's reference, stratum %d)", t.Stratum)
	case !t.Synced():
		return "not synchronised"
	}
	return fmt.Sprintf("%s (stratum %d), offset %+.6f s", t.Source, t.Stratum, t.Offset.Seconds())
}

// ErrNoChrony means the image carries no chrony; the node keeps its own clock.
var ErrNoChrony = errors.New("this image has no chrony (" + daemon + ")")

// Track asks chrony about the clock.
func Track(ctx context.Context, h *host.Host) (Tracking, error) {
	if !hasChrony(h) {
		return Tracking{}, ErrNoChrony
	}
	out, err := h.Output(ctx, "chronyc", "-c", "tracking")
	if err != nil {
		return Tracking{}, err
	}
	return ParseTracking(out)
}

// ParseTracking reads `chronyc -c tracking`: one CSV line of reference
// id, address, stratum, reference time, system time offset, last offset,
// RMS offset, frequency, residual frequency, skew, root delay, root
// dispersion, update interval and leap status.
func ParseTracking(out string) (Tracking, error) {
	line := strings.TrimSpace(out)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	f := strings.Split(line, ",")
	if len(f) < 14 {
		return Tracking{}, fmt.Errorf("chronyc tracking: %d fields, want 14: %q", len(f), line)
	}
	stratum, err := strconv.Atoi(f[2])
	if err != nil {
		return Tracking{}, fmt.Errorf("chronyc tracking: stratum %q: %w", f[2], err)
	}
	offset, err := strconv.ParseFloat(f[4], 64)
	if err != nil {
		return Tracking{}, fmt.Errorf("chronyc tracking: offset %q: %w", f[4], err)
	}
	// chrony prints the system clock's offset from true time as
	// "slow"/"fast" in the long form; the CSV value is positive when
	// the clock is fast.
	return Tracking{RefID: strings.ToUpper(f[0]), Source: f[1], Stratum: stratum,
		Offset: time.Duration(offset * float64(time.Second)), Leap: f[13]}, nil
}
