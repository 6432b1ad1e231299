package status

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
)

// boxLines checks that banner is a closed box of equal-width lines and
// returns the inner text of its rows.
func boxLines(t *testing.T, banner string) []string {
	t.Helper()
	assert.True(t, strings.HasSuffix(banner, "\n"), "banner does not end with a newline: %q", banner)
	lines := strings.Split(strings.TrimSuffix(banner, "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 3, "banner:\n%s", banner)
	width := utf8.RuneCountInString(lines[0])
	var rows []string
	for i, l := range lines {
		assert.Equal(t, width, utf8.RuneCountInString(l), "line %d is not as wide as line 0:\n%s", i, banner)
		switch {
		case i == 0:
			assert.True(t, strings.HasPrefix(l, "╭") && strings.HasSuffix(l, "╮") && strings.Contains(l, " Terrarium "), "top line %q", l)
		case i == len(lines)-1:
			assert.Equal(t, "╰"+strings.Repeat("─", width-2)+"╯", l, "bottom line")
		default:
			assert.True(t, strings.HasPrefix(l, "│") && strings.HasSuffix(l, "│"), "row %d %q is not boxed", i, l)
			rows = append(rows, strings.TrimSuffix(strings.TrimPrefix(l, "│"), "│"))
		}
	}
	return rows
}

// trimmed drops the rows' trailing padding.
func trimmed(rows []string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = strings.TrimRight(r, " ")
	}
	return out
}

func TestBanner(t *testing.T) {
	healthy := true
	s := Status{
		Name: "terrarium", Version: "1.2.3", Slot: "b", Boot: 7,
		State: StateVerified, Mode: "verify", Hostname: "node-1",
		Addresses: []string{"10.0.0.10/24 (enp0s2)", "fd00::10/64 (enp0s2)"},
		Healthy:   &healthy, Blessed: "good", SecureBoot: "on", StateEncryption: "tpm",
	}
	b := Banner(s)
	assert.Equal(t, []string{
		" version    terrarium 1.2.3 (slot b, boot 7)",
		" hostname   node-1",
		" addresses  10.0.0.10/24 (enp0s2), fd00::10/64 (enp0s2)",
		" state      verified (healthy, boot good)",
		" firmware   UEFI, Secure Boot on",
		" disk       TERRA-STATE encrypted, key sealed by the TPM",
	}, trimmed(boxLines(t, b)))
	s.StateEncryption = "none"
	assert.Contains(t, trimmed(boxLines(t, Banner(s))), " disk       TERRA-STATE NOT encrypted (no TPM)")
	assert.Equal(t, 68, utf8.RuneCountInString(strings.SplitN(b, "\n", 2)[0]), "banner width")
}

// The node count is what the API said when the node last asked: the
// banner says when, so a count taken before a worker joined does not pass
// for the cluster's present.
func TestBannerSaysWhenNodesWereCounted(t *testing.T) {
	seen := time.Date(2026, 11, 28, 4, 40, 12, 0, time.FixedZone("CET", 3600))
	s := Status{State: StateProvisioned, Cluster: &kubeadmflow.ClusterStatus{
		Role: "init", APIUp: true, Nodes: "1/1 nodes Ready", NodesAt: seen,
	}}
	assert.Contains(t, trimmed(boxLines(t, Banner(s))), " cluster    init, API up, 1/1 nodes Ready (seen 03:40 UTC)")

	s.Cluster.NodesAt = time.Time{} // a status written before the field existed
	assert.Contains(t, trimmed(boxLines(t, Banner(s))), " cluster    init, API up, 1/1 nodes Ready")
}

func TestBannerEmptyFields(t *testing.T) {
	unhealthy := false
	rows := trimmed(boxLines(t, Banner(Status{State: StateWaiting})))
	assert.Equal(t, []string{" hostname   -", " addresses  -", " state      waiting-for-config"}, rows[1:],
		"a status without a message has no note")
	rows = trimmed(boxLines(t, Banner(Status{State: StateProvisioned, Healthy: &unhealthy, Blessed: "not blessed", Message: "bad"})))
	require.Len(t, rows, 5)
	assert.Equal(t, " state      provisioned (UNHEALTHY, boot not blessed)", rows[3])
	assert.Equal(t, " note       bad", rows[4])
}

func TestBannerWrapsLongNote(t *testing.T) {
	note := "health check failed: hostname: /etc/hostname is \"intruder\", config says \"node-1\"; " +
		strings.Repeat("and then some more words, ", 8) + "ünïcödé at the end"
	b := Banner(Status{Name: "terrarium", Version: "1", Slot: "a", Boot: 1, State: StateFailed, Message: note})
	rows := boxLines(t, b)
	noteRows := rows[4:]
	require.GreaterOrEqual(t, len(noteRows), 3, "a %d-rune note:\n%s", utf8.RuneCountInString(note), b)
	// The first row carries the label; continuation rows are indented to
	// the value column; the text is complete and in order.
	assert.True(t, strings.HasPrefix(noteRows[0], " note       "), "first note row %q", noteRows[0])
	var text strings.Builder
	for i, r := range noteRows {
		if i > 0 {
			assert.True(t, strings.HasPrefix(r, strings.Repeat(" ", 12)), "continuation row %q is not indented", r)
		}
		text.WriteString(strings.TrimRight(r[12:], " "))
	}
	// Wrapping is by runes, so words may break, but nothing is lost (only
	// trailing spaces of a row, which TrimRight removed).
	assert.Equal(t, strings.ReplaceAll(note, " ", ""), strings.ReplaceAll(text.String(), " ", ""), "wrapped note text")
}

func TestBannerLongValues(t *testing.T) {
	// Every row wraps, not only the note.
	var addrs []string
	for range 10 {
		addrs = append(addrs, "fd00:1234:5678:9abc::10/64 (enp0s2)")
	}
	boxLines(t, Banner(Status{Name: strings.Repeat("n", 80), Version: "v", State: StateVerified, Addresses: addrs}))
}

func TestBannerMultiLineNote(t *testing.T) {
	// An invalid config's message lists one problem per line; each line
	// stays inside the box.
	msg := "machine.yaml: $.hostname: required (line 1)\nmachine.yaml: $.bogus: unknown field (line 4)"
	rows := boxLines(t, Banner(Status{State: StateConfigInvalid, Message: msg}))
	require.Len(t, rows, 6)
	assert.True(t, strings.HasPrefix(rows[4], " note       machine.yaml: $.hostname"), "note row %q", rows[4])
	assert.True(t, strings.HasPrefix(rows[5], strings.Repeat(" ", 12)+"machine.yaml: $.bogus"), "note row %q", rows[5])
}

func TestWrap(t *testing.T) {
	assert.Equal(t, []string{"short"}, wrap("short", 10))
	assert.Equal(t, []string{""}, wrap("", 10))
	// Continuation parts are indented to the value column (12 runes).
	assert.Equal(t, []string{
		strings.Repeat("x", 20),
		strings.Repeat(" ", 12) + strings.Repeat("x", 8),
		strings.Repeat(" ", 12) + strings.Repeat("x", 2),
	}, wrap(strings.Repeat("x", 30), 20))
	for _, part := range wrap(strings.Repeat("é", 200), 65) {
		assert.LessOrEqual(t, utf8.RuneCountInString(part), 65)
	}
}
