package support

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/apilb"
	"github.com/terrarium-os/terrarium/pkg/node/kube/cisbench"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
)

// statusFile is where firstboot publishes the node's status.
const statusFile = layout.StatusFile

// units are the services whose state and log every bundle holds.
func units() []string {
	return []string{
		"terrarium-firstboot.service", "terrarium-registry.service", "terrarium-snapshotter.service", apilb.Unit,
		"containerd.service", "kubelet.service",
	}
}

// kubectlTimeout bounds each of kubectl's requests (the item's timeout
// bounds the whole command).
const kubectlTimeout = "20s"

// kubectlTimeouts: a kubectl has twice the item's time. Its discovery and
// its request, each bounded by kubectlTimeout, took over 30 s on a busy
// emulated control plane (make e2e), where the node list is what a reader
// of the bundle wants first.
const kubectlTimeouts = 2

// workerNote stands in for the cluster's state on a node without the
// admin kubeconfig.
const workerNote = "This node has no " + kubeadmflow.AdminKubeconfig + ": it is a worker (or a control plane\n" +
	"that has not formed its cluster yet), so the states of the cluster's nodes and pods\n" +
	"are not collected here. A control plane's support bundle holds them.\n"

// item is one member of a bundle, as data: its path under the archive's
// root, what it is made from (for index.txt) and how it is collected.
type item struct {
	name, source string
	collect      func(ctx context.Context) ([]byte, error)
	// tail: when too long, keep the end (logs and command output), not
	// the beginning (files).
	tail bool
	// timeouts is how many of Options.Timeout the item has (0 and 1:
	// one): more for the API's, which a busy control plane (the reason
	// for many a support bundle) answers slowly.
	timeouts int
}

// member is a collected, capped and redacted item.
type member struct {
	file File
	data []byte
}

// collector gathers one bundle's members.
type collector struct {
	h         *host.Host
	opts      Options
	config    nodeConfig
	red       *Redactor
	transport *http.Transport
	client    *http.Client
}

func newCollector(h *host.Host, opts Options, config nodeConfig, red *Redactor) *collector {
	// The registry is on loopback: never through a proxy.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	return &collector{h: h, opts: opts, config: config, red: red, transport: tr, client: &http.Client{Transport: tr}}
}

// close releases the collector's connections.
func (c *collector) close() { c.transport.CloseIdleConnections() }

// items lists the bundle's members in archive order (index.txt, written
// from the others, comes first and is not listed here).
func (c *collector) items() []item {
	journal := func(args ...string) []string {
		return slices.Concat([]string{"journalctl", "--no-pager", "-o", "short-iso", "-n", strconv.Itoa(c.opts.Lines)}, args)
	}
	its := []item{
		c.command("node/uname.txt", "uname", "-a"),
		c.file("node/os-release", "/etc/os-release"),
		c.file("node/release.json", layout.ReleaseFile),
		c.file("node/cmdline", "/proc/cmdline"),
		c.file("node/status.json", statusFile),
		c.journal("node/journal.json"),
		c.kubeadmProgress("node/kubeadm-progress.json"),
		c.machineConfig("node/machine.yaml"),
		c.command("journal/boot-0.log", journal("-b", "0")...),
		c.command("journal/boot-1.log", journal("-b", "-1")...),
		c.command("units/failed.txt", "systemctl", "--failed", "--no-pager"),
	}
	for _, u := range units() {
		dir := "units/" + strings.TrimSuffix(u, ".service")
		its = append(its,
			c.command(dir+"/status.txt", "systemctl", "status", "--no-pager", "--full", u),
			c.command(dir+"/journal.log", journal("-u", u)...))
	}
	crictl := []string{"crictl", "--runtime-endpoint", kubeadmconfig.CRISocket}
	its = append(its,
		c.command("containers/crictl-ps.txt", slices.Concat(crictl, []string{"ps", "-a"})...),
		c.command("containers/crictl-pods.txt", slices.Concat(crictl, []string{"pods"})...),
		// ctr ships with containerd, where crictl may not be installed.
		c.command("containers/ctr-containers.txt", "ctr", "--namespace", "k8s.io", "containers", "ls"),
		c.command("containers/ctr-tasks.txt", "ctr", "--namespace", "k8s.io", "tasks", "ls"),
		c.kubectl("kubernetes/nodes.txt", "get", "nodes", "-o", "wide"),
		c.kubectl("kubernetes/pods.txt", "get", "pods", "-A", "-o", "wide"),
		c.kubectl("kubernetes/events.txt", "get", "events", "-A", "--sort-by=.lastTimestamp"),
		c.newestLog("kubernetes/audit.log", layout.AuditLogDir, auditLogCap),
		c.cisBenchmark("kubernetes/cis-benchmark.txt"),
		c.file("registry/config.json", layout.RegistryConfigFile),
		c.file("registry/sideloads.jsonl", layout.RegistrySideloadLog),
		c.get("registry/v2.txt", "/v2/"),
		c.get("registry/catalog.txt", "/v2/_catalog"),
		c.file("balancer/config.json", apilb.ConfigFile),
		c.command("network/ip-addr.txt", "ip", "-d", "addr"),
		c.command("network/ip-route.txt", "ip", "route"),
		c.command("network/ip-route6.txt", "ip", "-6", "route"),
		c.command("storage/df.txt", "df", "-h"),
		c.command("storage/findmnt.txt", "findmnt"),
		c.listing("storage/etcd-snapshots.txt", layout.EtcdSnapshotDir),
		c.dmesg("kernel/dmesg.txt"),
	)
	return its
}

// command runs argv on the host.
func (c *collector) command(name string, argv ...string) item {
	return item{name: name, source: strings.Join(argv, " "), tail: true, collect: func(ctx context.Context) ([]byte, error) {
		out, err := c.h.Command(ctx, argv[0], argv[1:]...)
		if err != nil {
			return out, fmt.Errorf("%s: %w", argv[0], err)
		}
		return out, nil
	}}
}

// dmesg is the end of the kernel's ring buffer.
func (c *collector) dmesg(name string) item {
	it := c.command(name, "dmesg")
	run := it.collect
	it.source += fmt.Sprintf(" (last %d lines)", c.opts.Lines)
	it.collect = func(ctx context.Context) ([]byte, error) {
		out, err := run(ctx)
		return lastLines(out, c.opts.Lines), err
	}
	return it
}

// kubectl asks the API with the admin kubeconfig, on a node that has one.
func (c *collector) kubectl(name string, args ...string) item {
	argv := slices.Concat([]string{"kubectl", "--kubeconfig", kubeadmflow.AdminKubeconfig, "--request-timeout", kubectlTimeout}, args)
	it := c.command(name, argv...)
	it.timeouts = kubectlTimeouts
	run := it.collect
	it.collect = func(ctx context.Context) ([]byte, error) {
		if _, err := os.Stat(c.h.Path(kubeadmflow.AdminKubeconfig)); errors.Is(err, fs.ErrNotExist) {
			return []byte(workerNote), nil
		}
		return run(ctx)
	}
	return it
}

// file reads a file of the host, up to MaxBytes. Excluded files are
// never read.
func (c *collector) file(name, p string) item {
	return item{name: name, source: p, collect: func(context.Context) ([]byte, error) {
		if excluded(p) {
			return nil, &os.PathError{Op: "read", Path: p, Err: ErrExcluded}
		}
		f, err := os.Open(c.h.Path(p))
		if err != nil {
			return nil, hostPathError(err, p)
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, int64(c.opts.MaxBytes)+1))
		return data, hostPathError(err, p)
	}}
}

// cisBenchmark is the node's CIS Kubernetes Benchmark report (the table
// `firstboot cis-benchmark` prints): what a security review asks for,
// from the node as it runs.
func (c *collector) cisBenchmark(name string) item {
	return item{name: name, source: "firstboot cis-benchmark", collect: func(ctx context.Context) ([]byte, error) {
		r, err := cisbench.Run(ctx, c.h)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := r.Write(&b); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}}
}

// listing names a directory's entries with their sizes and times, never
// their content (the etcd snapshots: whether the schedule runs).
func (c *collector) listing(name, dir string) item {
	return item{name: name, source: "the entries of " + dir, collect: func(context.Context) ([]byte, error) {
		entries, err := os.ReadDir(c.h.Path(dir))
		if errors.Is(err, fs.ErrNotExist) {
			return []byte(dir + " does not exist on this node\n"), nil
		}
		if err != nil {
			return nil, hostPathError(err, dir)
		}
		var b strings.Builder
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			fmt.Fprintf(&b, "%s %12d %s\n", fi.ModTime().UTC().Format(time.RFC3339), fi.Size(), e.Name())
		}
		return []byte(b.String()), nil
	}}
}

// auditLogCap is as much of the API server's audit log as a bundle
// holds: its newest events (metadata only, a few hundred bytes each).
const auditLogCap = 4 << 20

// newestLog is the end of the newest uncompressed file in dir, up to
// limit bytes (and MaxBytes), from a line's start: the audit log
// kube-apiserver is writing, not the rotated, gzipped ones beside it.
func (c *collector) newestLog(name, dir string, limit int) item {
	limit = min(limit, c.opts.MaxBytes)
	return item{name: name, source: fmt.Sprintf("the last %d bytes of the newest file in %s", limit, dir), tail: true, collect: func(context.Context) ([]byte, error) {
		entries, err := os.ReadDir(c.h.Path(dir))
		if errors.Is(err, fs.ErrNotExist) {
			return []byte(dir + " does not exist on this node (only control planes keep an audit log)\n"), nil
		}
		if err != nil {
			return nil, hostPathError(err, dir)
		}
		var newest fs.FileInfo
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() || strings.HasSuffix(e.Name(), ".gz") {
				continue
			}
			if newest == nil || fi.ModTime().After(newest.ModTime()) {
				newest = fi
			}
		}
		if newest == nil {
			return []byte(dir + " holds no log yet\n"), nil
		}
		p := filepath.Join(dir, newest.Name())
		f, err := os.Open(c.h.Path(p))
		if err != nil {
			return nil, hostPathError(err, p)
		}
		defer f.Close()
		// Room for the line that says what was left out, within limit.
		keep := int64(max(limit-256, 0))
		skipped := max(newest.Size()-keep, 0)
		if _, err := f.Seek(skipped, io.SeekStart); err != nil {
			return nil, hostPathError(err, p)
		}
		data, err := io.ReadAll(io.LimitReader(f, keep))
		if err != nil {
			return nil, hostPathError(err, p)
		}
		if skipped > 0 {
			// From the first whole line.
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				data = data[i+1:]
			}
			data = append(fmt.Appendf(nil, "[... %s: the first %d bytes left out ...]\n", p, newest.Size()-int64(len(data))), data...)
		}
		return data, nil
	}}
}

// get fetches a URL of the node's registry: the status line and the body.
func (c *collector) get(name, path string) item {
	url := c.opts.RegistryURL + path
	return item{name: name, source: "GET " + url, collect: func(ctx context.Context) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		out := fmt.Appendf(nil, "%s %s\n\n", resp.Proto, resp.Status)
		body, err := io.ReadAll(io.LimitReader(resp.Body, int64(c.opts.MaxBytes)+1))
		out = append(out, body...)
		if err != nil {
			return out, fmt.Errorf("GET %s: %w", url, err)
		}
		if resp.StatusCode != http.StatusOK {
			return out, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return out, nil
	}}
}

// journal is the node's journal as stored, up to MaxBytes.
func (c *collector) journal(name string) item {
	p := nodestate.JournalFile.String()
	return item{name: name, source: p, collect: func(context.Context) ([]byte, error) {
		data, err := nodestate.On(c.h).JournalBytes(int64(c.opts.MaxBytes) + 1)
		return data, hostPathError(err, p)
	}}
}

// kubeadmProgress is the Kubernetes part of the node's journal.
func (c *collector) kubeadmProgress(name string) item {
	return item{name: name, source: "kubeadm in " + nodestate.JournalFile.String(), collect: func(context.Context) ([]byte, error) {
		j, err := nodestate.On(c.h).ReadJournal()
		if err != nil {
			return nil, err
		}
		if j.Kubeadm == nil {
			return []byte("null\n"), nil
		}
		data, err := json.MarshalIndent(j.Kubeadm, "", "  ")
		return append(data, '\n'), err
	}}
}

// machineConfig is the stored machine config with its secrets replaced;
// a config that cannot be parsed at all is left out.
func (c *collector) machineConfig(name string) item {
	return item{name: name, source: nodestate.ConfigFile.String() + " (secret fields replaced)", collect: func(context.Context) ([]byte, error) {
		if c.config.cfg == nil {
			return nil, c.config.err
		}
		data, err := RedactConfig(c.config.cfg).Marshal()
		if err != nil {
			return nil, err
		}
		if c.config.err != nil {
			return data, fmt.Errorf("the stored config does not validate: %w", c.config.err)
		}
		return data, nil
	}}
}

// run collects an item within its timeout (Options.Timeout, or a multiple
// of it: item.timeouts), caps and redacts it. An error is kept at the end
// of the content and in the member's File.
func (c *collector) run(ctx context.Context, it item) member {
	timeout := c.opts.Timeout * time.Duration(max(it.timeouts, 1))
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, err := it.collect(ictx)
	if err != nil && ictx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	data = capBytes(data, c.opts.MaxBytes, it.tail)
	if err != nil {
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		data = fmt.Appendf(data, "--- error: %v\n", err)
	}
	return c.redacted(it.name, it.source, data, err)
}

// redacted makes a member of content and its error, both redacted.
func (c *collector) redacted(name, source string, data []byte, err error) member {
	out, n := c.red.Redact(data)
	f := File{Name: name, Source: source, Redactions: n}
	if len(data) > 0 && len(out) == 0 {
		err = ErrWithheld
		out = []byte("--- error: " + ErrWithheld.Error() + "\n")
	}
	if err != nil {
		msg, _ := c.red.Redact([]byte(err.Error()))
		if f.Err = string(msg); f.Err == "" {
			f.Err = ErrWithheld.Error()
		}
	}
	f.Size = len(out)
	return member{file: f, data: out}
}

// excluded reports the files a bundle never holds: private keys, the
// kubeconfigs that embed them, and etcd's data in any form (which holds
// the cluster's Secrets).
func excluded(p string) bool {
	p = filepath.Clean(p)
	switch {
	case strings.HasSuffix(p, ".key"), strings.HasSuffix(p, "-key.pem"),
		strings.HasPrefix(p, kubeadmflow.KubernetesPKIDir+"/"),
		strings.HasPrefix(p, layout.EtcdDataDir+"/"),
		strings.HasPrefix(p, layout.EtcdSnapshotDir+"/"),
		strings.HasPrefix(p, layout.BackupDir+"/"):
		return true
	}
	return slices.Contains(kubeconfigs(), p)
}

// hostPathError names the host path p, not its place under the host's
// root, in a file system error.
func hostPathError(err error, p string) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return &os.PathError{Op: pe.Op, Path: p, Err: pe.Err}
	}
	return err
}

// capBytes cuts data to about limit bytes at a line boundary, keeping its
// end (tail) or its beginning, and says where it cut.
func capBytes(data []byte, limit int, tail bool) []byte {
	if len(data) <= limit {
		return data
	}
	if tail {
		cut := len(data) - limit
		if i := bytes.IndexByte(data[cut:], '\n'); i >= 0 {
			cut += i + 1
		}
		return append(fmt.Appendf(nil, "[... %d bytes cut ...]\n", cut), data[cut:]...)
	}
	kept := data[:limit]
	if i := bytes.LastIndexByte(kept, '\n'); i >= 0 {
		kept = kept[:i+1]
	}
	return fmt.Appendf(kept[:len(kept):len(kept)], "[... cut after %d bytes ...]\n", len(kept))
}

// lastLines keeps the last n lines of data.
func lastLines(data []byte, n int) []byte {
	trimmed := bytes.TrimRight(data, "\n")
	at := len(trimmed)
	for range n {
		if at = bytes.LastIndexByte(trimmed[:at], '\n'); at < 0 {
			return data
		}
	}
	return append(trimmed[at+1:len(trimmed):len(trimmed)], '\n')
}
