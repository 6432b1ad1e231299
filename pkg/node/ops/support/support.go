// Package support writes a node's support bundle: one tar.gz archive with
// what it takes to tell why a node or its cluster misbehaves — the journals
// of this boot and the one before, the node's state and firstboot's
// status, the logs and states of Terrarium's units, containers, nodes and
// pods, the registry's and the balancer's state, network, storage and
// kernel — with every secret the node holds redacted.
//
// Every member goes through a Redactor that knows the node's secrets (those
// of its stored and embedded machine configs, Ignition's included, its
// private key files and kubeconfigs) and also replaces any PEM private key
// and anything shaped like a bootstrap token. Private key files and admin
// kubeconfigs are never read into the bundle at all, and the machine config
// is included re-marshalled with exactly the fields machineconfig.Fields
// classifies as secret replaced, each by its Marker and what it was
// (RedactConfig).
//
// Collecting is best-effort: a command that fails, hangs or is missing, or
// a file that is absent, leaves its error in its member and in index.txt,
// and the bundle is written all the same. Only a cancelled context or a
// failing writer fails Collect.
package support

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/mirrors"
)

// Defaults of Options.
const (
	DefaultLines    = 20000
	DefaultMaxBytes = 16 << 20
	DefaultTimeout  = 30 * time.Second
)

const (
	// parallel is how many members are collected at once: commands wait
	// on I/O and daemons far more than they compute.
	parallel = 4
	// timeFormat is the UTC time in the bundle's name.
	timeFormat = "20060102T150405Z"
	// namePrefix starts the name of every bundle.
	namePrefix = "terrarium-support-"
)

// Options tune a bundle; the zero value has the defaults.
type Options struct {
	// Lines caps each log (a boot's journal, a unit's, the kernel's) to
	// its last Lines lines. Default DefaultLines.
	Lines int
	// MaxBytes caps each member: a longer command output keeps its end, a
	// longer file its beginning. Default DefaultMaxBytes.
	MaxBytes int
	// Timeout bounds each command and request (kubectl has twice it).
	// Default DefaultTimeout.
	Timeout time.Duration
	// RegistryURL is the node's registry on loopback. Default
	// http://127.0.0.1:5000 (mirrors.Loopback).
	RegistryURL string
}

// withDefaults fills in the defaults and rejects negative caps.
func (o Options) withDefaults() (Options, error) {
	if o.Lines < 0 || o.MaxBytes < 0 || o.Timeout < 0 {
		return o, fmt.Errorf("support bundle: negative cap in options (lines %d, bytes %d, timeout %s)", o.Lines, o.MaxBytes, o.Timeout)
	}
	if o.Lines == 0 {
		o.Lines = DefaultLines
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RegistryURL == "" {
		o.RegistryURL = "http://" + mirrors.Loopback
	}
	o.RegistryURL = strings.TrimSuffix(o.RegistryURL, "/")
	return o, nil
}

// Summary says what a bundle holds.
type Summary struct {
	// Name is the archive's root directory, also its file name without
	// .tar.gz: terrarium-support-<hostname>-<UTC time>.
	Name string
	// Files are the members, in archive order, named relative to Name.
	Files []File
	// Secrets is how many secret values the node was found to hold.
	Secrets int
	// Redactions is how many stretches of text were redacted in all.
	Redactions int
}

// Failed lists the members that hold an error instead of, or besides,
// their content.
func (s Summary) Failed() []File {
	var out []File
	for _, f := range s.Files {
		if f.Err != "" {
			out = append(out, f)
		}
	}
	return out
}

// File is one member of a bundle.
type File struct {
	// Name is the path under the archive's root directory.
	Name string
	// Source is what it was made from: a command line, a file or a URL.
	Source string
	// Size is its length in bytes, as written.
	Size int
	// Redactions is how many stretches of it were redacted.
	Redactions int
	// Err, when set, says why its content is missing or partial.
	Err string
}

// Collect gathers the node's support bundle and writes it to w as a
// tar.gz archive. The archive's members come in a fixed order, owned by
// root and dated by h's clock, so the same node state gives the same
// bytes.
func Collect(ctx context.Context, h *host.Host, w io.Writer, opts Options) (Summary, error) {
	b, err := gather(ctx, h, opts)
	if err != nil {
		return Summary{}, err
	}
	if err := b.write(w); err != nil {
		return Summary{}, fmt.Errorf("write support bundle %s: %w", b.summary.Name, err)
	}
	return b.summary, nil
}

// WriteFile gathers the node's support bundle and writes it atomically to
// <dir>/terrarium-support-<hostname>-<UTC time>.tar.gz, mode 0600. dir is a
// path on the host (under h.Root) and must exist; the returned path is the
// archive's, on the host.
func WriteFile(ctx context.Context, h *host.Host, dir string, opts Options) (string, Summary, error) {
	b, err := gather(ctx, h, opts)
	if err != nil {
		return "", Summary{}, err
	}
	p := filepath.Join(dir, b.summary.Name+".tar.gz")
	if err := atomicfile.Write(h.Path(p), 0o600, b.write); err != nil {
		return "", Summary{}, fmt.Errorf("write support bundle: %w", err)
	}
	return p, b.summary, nil
}

// gather collects and redacts every member.
func gather(ctx context.Context, h *host.Host, opts Options) (*bundle, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	now := h.Now().UTC().Truncate(time.Second)
	stored, raw := loadStoredConfig(h)
	secrets := hostSecrets(h, stored, raw)
	c := newCollector(h, opts, stored, NewRedactor(secrets...))
	defer c.close()

	items := c.items()
	members := make([]member, len(items))
	var g errgroup.Group
	g.SetLimit(parallel)
	for i, it := range items {
		g.Go(func() error {
			members[i] = c.run(ctx, it)
			return nil
		})
	}
	_ = g.Wait() // members record their own errors
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("support bundle: %w", err)
	}
	b := &bundle{time: now, summary: Summary{
		Name:    namePrefix + hostname(h, stored) + "-" + now.Format(timeFormat),
		Secrets: countDistinct(secrets),
	}}
	b.members = append([]member{c.index(b.summary, members)}, members...)
	for _, m := range b.members {
		b.summary.Files = append(b.summary.Files, m.file)
		b.summary.Redactions += m.file.Redactions
	}
	return b, nil
}

// countDistinct counts the distinct non-blank values.
func countDistinct(vs []string) int {
	seen := map[string]bool{}
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			seen[v] = true
		}
	}
	return len(seen)
}
