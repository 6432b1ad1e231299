package progress

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// fakeClock returns times from a script; each call advances to the next.
type fakeClock struct {
	t     *testing.T
	times []time.Time
}

func (c *fakeClock) now() time.Time {
	if len(c.times) == 0 {
		c.t.Fatal("clock read more often than expected")
	}
	now := c.times[0]
	c.times = c.times[1:]
	return now
}

func TestNonTTYLines(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	s := New(&buf, 3)
	if s.tty {
		t.Fatal("a bytes.Buffer is taken for a terminal")
	}
	clock := &fakeClock{t: t, times: []time.Time{
		t0, t0.Add(1234 * time.Millisecond), // rootfs
		t0.Add(2 * time.Second), t0.Add(2*time.Second + 40*time.Millisecond), // initramfs
		t0.Add(3 * time.Second), t0.Add(3*time.Second + 90*time.Second), // disk
	}}
	s.now = clock.now

	s.Start("rootfs")
	s.Done("cached")
	s.Start("initramfs")
	s.Done("12 MiB")
	s.Start("disk")
	s.Done("")

	want := "[1/3] rootfs\n" +
		"[1/3] rootfs: done in 1.2s cached\n" +
		"[2/3] initramfs\n" +
		"[2/3] initramfs: done in 0s 12 MiB\n" +
		"[3/3] disk\n" +
		"[3/3] disk: done in 1m30s \n"
	if got := buf.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(buf.String(), "\r") || strings.Contains(buf.String(), "\033") {
		t.Errorf("non-TTY output has terminal control characters: %q", buf.String())
	}
	if len(clock.times) != 0 {
		t.Errorf("clock read %d times fewer than expected", len(clock.times))
	}
}

func TestDurationRounding(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "done in 0s"},
		{49 * time.Millisecond, "done in 0s"},
		{50 * time.Millisecond, "done in 100ms"},
		{149 * time.Millisecond, "done in 100ms"},
		{2*time.Second + 260*time.Millisecond, "done in 2.3s"},
		{time.Hour + 5*time.Second, "done in 1h0m5s"},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			t0 := time.Unix(1767225600, 0)
			var buf bytes.Buffer
			s := New(&buf, 1)
			clock := &fakeClock{t: t, times: []time.Time{t0, t0.Add(tt.d)}}
			s.now = clock.now
			s.Start("x")
			s.Done("note")
			line := strings.Split(buf.String(), "\n")[1]
			if want := "[1/1] x: " + tt.want + " note"; line != want {
				t.Errorf("line %q, want %q", line, want)
			}
		})
	}
}

func TestTTYDraw(t *testing.T) {
	// Drive the terminal path directly: isTerminal only says which to use.
	t0 := time.Unix(0, 0)
	var buf bytes.Buffer
	s := &Stages{w: &buf, tty: true, total: 2, now: (&fakeClock{t: t, times: []time.Time{t0, t0.Add(time.Second), t0, t0}}).now}
	s.Start("rootfs")
	if got, want := buf.String(), "\r\033[K["+strings.Repeat("░", 24)+"] 0/2 rootfs …"; got != want {
		t.Errorf("Start drew %q, want %q", got, want)
	}
	buf.Reset()
	s.Done("cached")
	out := buf.String()
	if !strings.HasPrefix(out, "\r\033[K["+strings.Repeat("█", 12)+strings.Repeat("░", 12)+"] 1/2 rootfs ") {
		t.Errorf("Done did not redraw a half-full bar: %q", out)
	}
	if !strings.HasSuffix(out, "\r\033[K  ✓ rootfs"+strings.Repeat(" ", 29)+"1s  cached\n") {
		t.Errorf("Done did not print the finished stage: %q", out)
	}
	buf.Reset()
	s.Start("disk")
	s.Done("")
	if !strings.Contains(buf.String(), "["+strings.Repeat("█", 24)+"] 2/2 disk") {
		t.Errorf("last stage did not fill the bar: %q", buf.String())
	}
}

func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("bytes.Buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is a terminal")
	}
	if New(f, 1).tty {
		t.Error("New took a regular file for a terminal")
	}
}

func TestZeroTotal(t *testing.T) {
	var buf bytes.Buffer
	s := &Stages{w: &buf, tty: true, total: 0, now: time.Now}
	s.Start("x") // must not divide by zero
	if !strings.Contains(buf.String(), "0/0 x") {
		t.Errorf("output %q", buf.String())
	}
}
