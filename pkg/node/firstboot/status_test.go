package firstboot

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// boxLines checks that banner is a closed box of equal-width lines and
// returns the inner text of its rows.
func boxLines(t *testing.T, banner string) []string {
	t.Helper()
	if !strings.HasSuffix(banner, "\n") {
		t.Errorf("banner does not end with a newline: %q", banner)
	}
	lines := strings.Split(strings.TrimSuffix(banner, "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("banner has %d lines:\n%s", len(lines), banner)
	}
	width := utf8.RuneCountInString(lines[0])
	var rows []string
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n != width {
			t.Errorf("line %d is %d runes wide, line 0 is %d:\n%s", i, n, width, banner)
		}
		switch {
		case i == 0:
			if !strings.HasPrefix(l, "╭") || !strings.HasSuffix(l, "╮") || !strings.Contains(l, " Terrarium ") {
				t.Errorf("top line %q", l)
			}
		case i == len(lines)-1:
			if l != "╰"+strings.Repeat("─", width-2)+"╯" {
				t.Errorf("bottom line %q", l)
			}
		default:
			if !strings.HasPrefix(l, "│") || !strings.HasSuffix(l, "│") {
				t.Errorf("row %d %q is not boxed", i, l)
			}
			rows = append(rows, strings.TrimSuffix(strings.TrimPrefix(l, "│"), "│"))
		}
	}
	return rows
}

func TestBanner(t *testing.T) {
	healthy := true
	s := Status{
		Name: "terrarium", Version: "1.2.3", Slot: "b", Boot: 7,
		State: StateVerified, Mode: "verify", Hostname: "node-1",
		Addresses: []string{"10.0.0.10/24 (enp0s2)", "fd00::10/64 (enp0s2)"},
		Healthy:   &healthy, Blessed: "good",
	}
	b := Banner(s)
	rows := boxLines(t, b)
	want := []string{
		" version    terrarium 1.2.3 (slot b, boot 7)",
		" hostname   node-1",
		" addresses  10.0.0.10/24 (enp0s2), fd00::10/64 (enp0s2)",
		" state      verified (healthy, boot good)",
	}
	if len(rows) != len(want) {
		t.Fatalf("rows:\n%s", b)
	}
	for i := range want {
		if got := strings.TrimRight(rows[i], " "); got != want[i] {
			t.Errorf("row %d = %q, want %q", i, got, want[i])
		}
	}
	if w := utf8.RuneCountInString(strings.SplitN(b, "\n", 2)[0]); w != 68 {
		t.Errorf("banner is %d wide, want 68", w)
	}
}

func TestBannerEmptyFields(t *testing.T) {
	unhealthy := false
	rows := boxLines(t, Banner(Status{State: StateWaiting}))
	if got := strings.TrimRight(rows[1], " "); got != " hostname   -" {
		t.Errorf("hostname row %q", got)
	}
	if got := strings.TrimRight(rows[2], " "); got != " addresses  -" {
		t.Errorf("addresses row %q", got)
	}
	if got := strings.TrimRight(rows[3], " "); got != " state      waiting-for-config" {
		t.Errorf("state row %q", got)
	}
	if len(rows) != 4 {
		t.Errorf("a status without a message has a note: %q", rows)
	}
	rows = boxLines(t, Banner(Status{State: StateProvisioned, Healthy: &unhealthy, Blessed: "not blessed", Message: "bad"}))
	if got := strings.TrimRight(rows[3], " "); got != " state      provisioned (UNHEALTHY, boot not blessed)" {
		t.Errorf("state row %q", got)
	}
	if got := strings.TrimRight(rows[4], " "); got != " note       bad" {
		t.Errorf("note row %q", got)
	}
}

func TestBannerWrapsLongNote(t *testing.T) {
	note := "health check failed: hostname: /etc/hostname is \"intruder\", config says \"node-1\"; " +
		strings.Repeat("and then some more words, ", 8) + "ünïcödé at the end"
	b := Banner(Status{Name: "terrarium", Version: "1", Slot: "a", Boot: 1, State: StateFailed, Message: note})
	rows := boxLines(t, b)
	noteRows := rows[4:]
	if len(noteRows) < 3 {
		t.Fatalf("a %d-rune note is on %d rows:\n%s", utf8.RuneCountInString(note), len(noteRows), b)
	}
	// The first row carries the label; continuation rows are indented to
	// the value column; the text is complete and in order.
	if !strings.HasPrefix(noteRows[0], " note       ") {
		t.Errorf("first note row %q", noteRows[0])
	}
	var text strings.Builder
	for i, r := range noteRows {
		if i > 0 && !strings.HasPrefix(r, strings.Repeat(" ", 12)) {
			t.Errorf("continuation row %q is not indented", r)
		}
		text.WriteString(strings.TrimRight(r[12:], " "))
	}
	// Wrapping is by runes, so words may break, but nothing is lost (only
	// trailing spaces of a row, which TrimRight removed).
	if got, want := strings.ReplaceAll(text.String(), " ", ""), strings.ReplaceAll(note, " ", ""); got != want {
		t.Errorf("wrapped note text:\n%q\nwant\n%q", got, want)
	}
}

func TestBannerLongValues(t *testing.T) {
	// Every row wraps, not only the note.
	var addrs []string
	for i := 0; i < 10; i++ {
		addrs = append(addrs, "fd00:1234:5678:9abc::10/64 (enp0s2)")
	}
	boxLines(t, Banner(Status{Name: strings.Repeat("n", 80), Version: "v", State: StateVerified, Addresses: addrs}))
}

func TestBannerMultiLineNote(t *testing.T) {
	// An invalid config's message lists one problem per line; each line
	// stays inside the box.
	msg := "machine.yaml: $.hostname: required (line 1)\nmachine.yaml: $.bogus: unknown field (line 4)"
	rows := boxLines(t, Banner(Status{State: StateConfigInvalid, Message: msg}))
	if len(rows) != 6 || !strings.HasPrefix(rows[4], " note       machine.yaml: $.hostname") ||
		!strings.HasPrefix(rows[5], strings.Repeat(" ", 12)+"machine.yaml: $.bogus") {
		t.Errorf("note rows: %q", rows)
	}
	joined := strings.Join(rows, "\n")
	for _, want := range []string{"$.hostname: required", "$.bogus: unknown field"} {
		if !strings.Contains(joined, want) {
			t.Errorf("banner lacks %q:\n%s", want, joined)
		}
	}
}

func TestWrap(t *testing.T) {
	if got := wrap("short", 10); len(got) != 1 || got[0] != "short" {
		t.Errorf("wrap(short) = %q", got)
	}
	if got := wrap("", 10); len(got) != 1 || got[0] != "" {
		t.Errorf("wrap(\"\") = %q", got)
	}
	// Continuation parts are indented to the value column (12 runes).
	got := wrap(strings.Repeat("x", 30), 20)
	want := []string{
		strings.Repeat("x", 20),
		strings.Repeat(" ", 12) + strings.Repeat("x", 8),
		strings.Repeat(" ", 12) + strings.Repeat("x", 2),
	}
	if !slices.Equal(got, want) {
		t.Errorf("wrap = %q, want %q", got, want)
	}
	for _, part := range wrap(strings.Repeat("é", 200), 65) {
		if n := utf8.RuneCountInString(part); n > 65 {
			t.Errorf("part of %d runes", n)
		}
	}
}

// consoleBanners returns every banner printed on a console.
func consoleBanners(console string) []string {
	var out []string
	var cur []string
	for _, l := range strings.Split(console, "\n") {
		switch {
		case strings.HasPrefix(l, "╭"):
			cur = []string{l}
		case cur != nil:
			cur = append(cur, l)
			if strings.HasPrefix(l, "╰") {
				out = append(out, strings.Join(cur, "\n")+"\n")
				cur = nil
			}
		}
	}
	return out
}
