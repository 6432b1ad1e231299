// Package status is what a node says about itself: status.json under
// /run/terrarium and the banner on its console. One Publisher owns the
// status and its lock; the boot sequence and every controller change it
// through the Publisher only.
package status

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
)

// States a node reports.
const (
	StateWaiting       = "waiting-for-config"
	StateConfigInvalid = "config-invalid"
	StateProvisioned   = "provisioned"
	StateVerified      = "verified"
	// StateChanged: a signed config change was applied this boot.
	StateChanged = "changed"
	StateFailed  = "failed"
	// StateInstalling: a live boot writes the ISO onto a disk;
	// StateInstalled: it did, and reboots into it.
	StateInstalling = "installing"
	StateInstalled  = "installed"
)

// File is where the node publishes its status, a path on the host.
const File = layout.StatusFile

// Status is the content of status.json.
type Status struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Slot    string `json:"slot"`
	Boot    int    `json:"boot"`
	// SecureBoot is the firmware's Secure Boot mode (efiboot.SecureBootMode).
	SecureBoot string `json:"secureBoot,omitempty"`
	// StateEncryption is TERRA-STATE's encryption on this boot
	// (layout.StateEncryptionTPM or layout.StateEncryptionNone).
	StateEncryption string   `json:"stateEncryption,omitempty"`
	State           string   `json:"state"`
	Mode            string   `json:"mode,omitempty"`
	Hostname        string   `json:"hostname,omitempty"`
	Addresses       []string `json:"addresses,omitempty"`
	ConfigDigest    string   `json:"configDigest,omitempty"`
	StateCreated    string   `json:"stateCreated,omitempty"`
	// Enrolled says where and when the node enrolled ("from X at T").
	Enrolled string `json:"enrolled,omitempty"`
	Healthy  *bool  `json:"healthy,omitempty"`
	Blessed  string `json:"blessed,omitempty"`
	Message  string `json:"message,omitempty"`
	// Time is the node's time source and offset, as chrony last said.
	Time string `json:"time,omitempty"`
	// Cluster is the node's part in its Kubernetes cluster, if any.
	Cluster *kubeadmflow.ClusterStatus `json:"cluster,omitempty"`
	// Backup is a control plane's newest etcd snapshot and its schedule.
	Backup string `json:"backup,omitempty"`
	// Upgrade is the cluster's upgrade rollout, in one line
	// (rollout.Record.Summary).
	Upgrade string `json:"upgrade,omitempty"`
}

// SetHealthy records the health check's outcome.
func (s *Status) SetHealthy(healthy bool) { s.Healthy = &healthy }

// clone is a deep copy of s: no pointer of the copy reaches s.
func (s Status) clone() Status {
	c := s
	c.Addresses = append([]string(nil), s.Addresses...)
	if s.Healthy != nil {
		h := *s.Healthy
		c.Healthy = &h
	}
	if s.Cluster != nil {
		cl := *s.Cluster
		c.Cluster = &cl
	}
	return c
}

// Publisher owns a node's status: every change goes through it, under its
// lock, from whichever goroutine.
type Publisher struct {
	// path is status.json's path; console shows the banner.
	path    string
	console io.Writer
	log     *slog.Logger

	mu sync.Mutex
	s  Status
}

// NewPublisher publishes to path (status.json, a path of this process)
// and console, starting from initial; each publication lists the
// machine's addresses. A Publisher with path "" publishes nowhere: it
// keeps the status for Get (a command run beside the node's service, whose
// status.json is the service's).
func NewPublisher(path string, console io.Writer, log *slog.Logger, initial Status) *Publisher {
	return &Publisher{path: path, console: console, log: log, s: initial.clone()}
}

// Update changes the status without publishing it: the next Publish
// shows the change.
func (p *Publisher) Update(fn func(s *Status)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.s)
}

// Publish changes the status with fn (nil: no change), writes
// status.json, then prints the banner and the file's content (read back)
// on the console.
func (p *Publisher) Publish(fn func(s *Status)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fn != nil {
		fn(&p.s)
	}
	if p.path == "" {
		return
	}
	p.s.Addresses = Addresses()
	data, err := json.Marshal(p.s)
	if err != nil {
		p.log.Error("encode status", "err", err)
		return
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o755); err != nil {
		p.log.Error("write status", "err", err)
		return
	}
	if err := atomicfile.WriteFile(p.path, append(data, '\n'), 0o644); err != nil {
		p.log.Error("write status", "err", err)
	}
	written, err := os.ReadFile(p.path)
	if err != nil {
		p.log.Error("read back status", "err", err)
		return
	}
	// The console is for whoever looks; status.json, written above, is
	// the record.
	_, _ = fmt.Fprint(p.console, Banner(p.s))
	_, _ = fmt.Fprintf(p.console, "terrarium-status: %s", written)
}

// Get is a copy of the status as it stands.
func (p *Publisher) Get() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s.clone()
}

// Addresses are the machine's addresses with their interfaces, link-local
// and loopback ones left out.
func Addresses() []string {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, _, _ := net.ParseCIDR(a.String()); ip != nil && ip.IsLinkLocalUnicast() {
				continue
			}
			out = append(out, a.String()+" ("+ifc.Name+")")
		}
	}
	return out
}

// Banner draws the console banner.
func Banner(s Status) string {
	rows := [][2]string{
		{"version", fmt.Sprintf("%s %s (slot %s, boot %d)", s.Name, s.Version, s.Slot, s.Boot)},
		{"hostname", orDash(s.Hostname)},
		{"addresses", orDash(strings.Join(s.Addresses, ", "))},
		{"state", s.State + modeNote(s)},
	}
	if s.SecureBoot != "" {
		rows = append(rows, [2]string{"firmware", "UEFI, Secure Boot " + s.SecureBoot})
	}
	switch s.StateEncryption {
	case layout.StateEncryptionTPM:
		rows = append(rows, [2]string{"disk", "TERRA-STATE encrypted, key sealed by the TPM"})
	case layout.StateEncryptionNone:
		rows = append(rows, [2]string{"disk", "TERRA-STATE NOT encrypted (no TPM)"})
	}
	if s.Enrolled != "" {
		rows = append(rows, [2]string{"enrolled", s.Enrolled})
	}
	if s.Time != "" {
		rows = append(rows, [2]string{"time", s.Time})
	}
	if c := s.Cluster; c != nil {
		api := "down"
		if c.APIUp {
			api = "up"
		}
		nodes := orDash(c.Nodes)
		if c.Nodes != "" && !c.NodesAt.IsZero() {
			nodes += c.NodesAt.UTC().Format(" (seen 15:04 UTC)")
		}
		rows = append(rows, [2]string{"cluster", fmt.Sprintf("%s, API %s, %s", c.Role, api, nodes)})
		if c.Step != "" {
			rows = append(rows, [2]string{"step", c.Step})
		}
		if c.AdminKubeconfig != "" {
			rows = append(rows, [2]string{"kubeconfig", c.AdminKubeconfig})
		}
	}
	if s.Backup != "" {
		rows = append(rows, [2]string{"backup", s.Backup})
	}
	if s.Upgrade != "" {
		rows = append(rows, [2]string{"upgrade", s.Upgrade})
	}
	if s.Message != "" {
		rows = append(rows, [2]string{"note", s.Message})
	}
	const width = 66
	var b strings.Builder
	title := " Terrarium "
	b.WriteString("╭" + strings.Repeat("─", 3) + title + strings.Repeat("─", width-3-len(title)) + "╮\n")
	for _, row := range rows {
		// A value of several lines (an invalid config's problems) gets a
		// row per line, so no newline breaks the box.
		for i, text := range strings.Split(row[1], "\n") {
			label := row[0]
			if i > 0 {
				label = ""
			}
			line := fmt.Sprintf(" %-10s %s", label, text)
			for _, part := range wrap(line, width-1) {
				b.WriteString("│" + part + strings.Repeat(" ", width-len([]rune(part))) + "│\n")
			}
		}
	}
	b.WriteString("╰" + strings.Repeat("─", width) + "╯\n")
	return b.String()
}

func modeNote(s Status) string {
	var notes []string
	if s.Healthy != nil {
		notes = append(notes, map[bool]string{true: "healthy", false: "UNHEALTHY"}[*s.Healthy])
	}
	if s.Blessed != "" {
		notes = append(notes, "boot "+s.Blessed)
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, ", ") + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func wrap(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > n {
		out = append(out, string(r[:n]))
		r = append([]rune("            "), r[n:]...)
	}
	return append(out, string(r))
}
