package support

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// indexName is the member that lists the others.
const indexName = "index.txt"

// bundle is a collected support bundle, ready to write.
type bundle struct {
	time    time.Time
	summary Summary
	members []member
}

// write writes the bundle as a tar.gz archive: a root directory named
// after the bundle, each member's directories before it, every entry owned
// by root with the bundle's time, and a gzip header without name or time.
func (b *bundle) write(w io.Writer) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	root := b.summary.Name
	dirs := map[string]bool{}
	var addDir func(d string) error
	addDir = func(d string) error {
		if dirs[d] {
			return nil
		}
		if parent := path.Dir(d); d != root && parent != "." {
			if err := addDir(parent); err != nil {
				return err
			}
		}
		dirs[d] = true
		return tw.WriteHeader(b.header(tar.TypeDir, d+"/", 0o755, 0))
	}
	for _, m := range b.members {
		name := path.Join(root, m.file.Name)
		if err := addDir(path.Dir(name)); err != nil {
			return fmt.Errorf("add directory of %s: %w", m.file.Name, err)
		}
		if err := tw.WriteHeader(b.header(tar.TypeReg, name, 0o644, len(m.data))); err != nil {
			return fmt.Errorf("add %s: %w", m.file.Name, err)
		}
		if _, err := tw.Write(m.data); err != nil {
			return fmt.Errorf("add %s: %w", m.file.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("close gzip: %w", err)
	}
	return nil
}

func (b *bundle) header(typ byte, name string, mode int64, size int) *tar.Header {
	return &tar.Header{
		Typeflag: typ, Name: name, Mode: mode, Size: int64(size), ModTime: b.time,
		Uname: "root", Gname: "root", Format: tar.FormatPAX,
	}
}

// index makes index.txt: what the bundle is of, and each member with its
// source, size, redactions and error.
func (c *collector) index(s Summary, members []member) member {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "Terrarium support bundle %s\n\n", s.Name)
	redactions := 0
	for _, m := range members {
		redactions += m.file.Redactions
	}
	var about strings.Builder
	fmt.Fprintf(&about, "role\t%s\n", role(c.config))
	fmt.Fprintf(&about, "secrets\t%d known to the node, replaced by [REDACTED sha256:<first 8 hex digits of their SHA-256>]\n", s.Secrets)
	about.WriteString("\tin node/machine.yaml followed by what each was: [REDACTED sha256:…, 227 B: PEM EC PRIVATE KEY]\n")
	fmt.Fprintf(&about, "redactions\t%d\n", redactions)
	writeTable(&buf, about.String())
	buf.WriteString("\n")
	var list strings.Builder
	list.WriteString("MEMBER\tBYTES\tREDACTIONS\tSOURCE\tERROR\n")
	for _, m := range members {
		f := m.file
		fmt.Fprintf(&list, "%s\t%d\t%d\t%s\t%s\n", f.Name, f.Size, f.Redactions, f.Source, oneLine(f.Err))
	}
	writeTable(&buf, list.String())
	return c.redacted(indexName, "this bundle", buf.Bytes(), nil)
}

// writeTable aligns the tab-separated cells of rows into buf.
func writeTable(buf *bytes.Buffer, rows string) {
	tw := tabwriter.NewWriter(buf, 0, 4, 2, ' ', 0)
	// Into a bytes.Buffer: neither write can fail.
	_, _ = io.WriteString(tw, rows)
	_ = tw.Flush()
}

// role says what the stored config makes the node.
func role(nc nodeConfig) string {
	switch {
	case nc.cfg == nil:
		return fmt.Sprintf("unknown (%s)", oneLine(fmt.Sprint(nc.err)))
	case nc.cfg.Cluster == nil:
		return "no cluster"
	case nc.cfg.Cluster.IsControlPlane():
		return nc.cfg.Cluster.Role + " (control plane)"
	default:
		return nc.cfg.Cluster.Role
	}
}

// oneLine keeps a multi-line message on one line of the index.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// hostname is the node's name for the bundle's name: the stored config's,
// else /etc/hostname, reduced to a DNS label; "node" when there is none.
func hostname(h *host.Host, nc nodeConfig) string {
	name := ""
	if nc.cfg != nil {
		name = nc.cfg.Hostname
	}
	if name == "" {
		if b, err := readCapped(h.Path("/etc/hostname"), 256); err == nil {
			name = strings.TrimSpace(string(b))
		}
	}
	label := strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, name), "-")
	if len(label) > 63 {
		label = strings.TrimRight(label[:63], "-")
	}
	if label == "" {
		return "node"
	}
	return label
}
