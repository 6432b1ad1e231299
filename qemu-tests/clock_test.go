//go:build e2e

package qemutests

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rtcClockUnit is the transient systemd unit that steps a guest's wall
// clock to its RTC every few seconds.
const rtcClockUnit = "test-clock-from-rtc"

// clockFromRTC keeps a guest that runs on QEMU's instruction clock in step
// with its peers: every 2 s of its own time it sets the wall clock
// (CLOCK_REALTIME) from the RTC, which reads the host's time. Under the
// instruction clock a busy guest's clock falls behind real time, and four
// guests fall behind by different amounts: past a minute, a
// service-account token issued by one API server is "used before issued"
// at another, and certificates are not yet valid. Real machines' clocks
// keep time; this stands in for that, and stepping the wall clock leaves
// CLOCK_MONOTONIC, which every timeout in Go, etcd and the kubelet
// measures, dilated. It is started over SSH as soon as the admin user
// exists and lasts until the guest reboots.
//
// One long-lived loop at real-time priority, not a timer that starts a
// unit each time: a busy joining control plane takes tens of seconds to
// start each of a timer's units, and its clock then falls minutes behind
// the host's (docs/operations/qemu-ci.md).
func clockFromRTC(s *sshClient) error {
	// Stopping a loop already running first (and forgetting it, since a
	// stopped loop is a failed unit) makes it safe to call twice in one
	// boot (firstboot's banner, which keepClockFromRTC counts,
	// comes again when the service restarts).
	cmd := "sudo systemctl stop " + rtcClockUnit + " 2>/dev/null; sudo systemctl reset-failed " + rtcClockUnit + " 2>/dev/null; sudo systemd-run --quiet --unit=" + rtcClockUnit + " -p CPUSchedulingPolicy=rr -p CPUSchedulingPriority=10 " +
		`/bin/sh -c 'while :; do date -u -s @$(cat /sys/class/rtc/rtc0/since_epoch) >/dev/null; sleep 2; done'`
	if out, err := s.try(cmd); err != nil {
		return fmt.Errorf("start %s: %w: %s", rtcClockUnit, err, out)
	}
	return nil
}

// guestTime is how much time a guest's monotonic clock counted (its
// /proc/uptime) against the host's since the guest was powered on, and how
// far its wall clock stands from the host's.
type guestTime struct {
	guest, host time.Duration
	offset      time.Duration // guest's wall clock minus the host's
}

// readGuestTime reads the guest's uptime and wall clock over SSH; started
// is when its QEMU was started. It reads without a terminal
// (sshClient.read), up to five times until the output parses.
func readGuestTime(ctx context.Context, s *sshClient, started time.Time) (guestTime, error) {
	const cmd = "cat /proc/uptime; date +%s.%N"
	var last error
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		asked := time.Now()
		out, err := s.read(cmd)
		answered := time.Now()
		if err != nil {
			return guestTime{}, fmt.Errorf("%s: %w: %s", cmd, err, out)
		}
		f := strings.Fields(out)
		if len(f) != 3 {
			last = fmt.Errorf("%s: got %q, want uptime, idle time and the date", cmd, out)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		up, err1 := strconv.ParseFloat(f[0], 64)
		now, err2 := strconv.ParseFloat(f[2], 64)
		if err := errors.Join(err1, err2); err != nil {
			return guestTime{}, fmt.Errorf("%s: %q: %w", cmd, out, err)
		}
		// The host's time halfway through the round trip.
		mid := asked.Add(answered.Sub(asked) / 2)
		return guestTime{
			guest:  time.Duration(up * float64(time.Second)),
			host:   mid.Sub(started),
			offset: time.Duration((now - float64(mid.UnixNano())/1e9) * float64(time.Second)),
		}, nil
	}
	return guestTime{}, errors.Join(last, ctx.Err())
}

func (g guestTime) String() string {
	return fmt.Sprintf("%s of guest time in %s (%.0f %%), wall clock %+.1f s from the host's",
		g.guest.Round(time.Second), g.host.Round(time.Second), 100*g.guest.Seconds()/g.host.Seconds(), g.offset.Seconds())
}

// keepClockFromRTC runs clockFromRTC on n after each of its boots, for a
// scenario whose nodes reboot (clockFromRTC's unit lasts one boot), until
// ctx ends. A boot is counted by firstboot's banner on the console
// ("Terrarium 0.1.0, slot a, boot 1"; the kernel itself is quiet), each
// look reading on from the last banner seen; a failed start is logged and
// tried again on the next round, since a guest that is shutting down or
// still booting refuses it.
func keepClockFromRTC(ctx context.Context, t *testing.T, n *clusterNode, key sshKey) {
	banner := regexp.MustCompile(`Terrarium \S+, slot \S+, boot \d+`)
	read, boots, kept := 0, 0, 0
	for {
		if found := banner.FindAllStringIndex(n.vm.Console()[read:], -1); len(found) > 0 {
			boots += len(found)
			read += found[len(found)-1][1]
		}
		if boots > kept {
			s, err := trySSH(ctx, t, n.sshPort, key)
			if err == nil {
				err = clockFromRTC(s)
			}
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				t.Logf("%s: boot %d: %v (trying again)", n.name, boots, err)
			default:
				kept = boots
				t.Logf("%s: boot %d: wall clock follows the RTC", n.name, boots)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}
