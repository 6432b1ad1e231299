package cisbench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// The programs whose flags and files the benchmark reads, by the name
// their command line starts with.
const (
	apiServer         = "kube-apiserver"
	controllerManager = "kube-controller-manager"
	scheduler         = "kube-scheduler"
	etcd              = "etcd"
	kubelet           = "kubelet"
	kubeProxy         = "kube-proxy"
)

// kubeadm's paths, where the benchmark looks when no flag names a file.
const (
	manifestsDir     = "/etc/kubernetes/manifests"
	pkiDir           = "/etc/kubernetes/pki"
	cniDir           = "/etc/cni/net.d"
	etcdDataDir      = "/var/lib/etcd"
	kubeletConfig    = "/var/lib/kubelet/config.yaml"
	kubeletKubconfig = "/etc/kubernetes/kubelet.conf"
	etcdAccount      = "etcd"
)

// kubeletUnits are where a kubelet's systemd unit and its drop-ins may
// be; the benchmark checks every one that is there.
var kubeletUnitGlobs = []string{
	"/usr/lib/systemd/system/kubelet.service",
	"/usr/lib/systemd/system/kubelet.service.d/*.conf",
	"/lib/systemd/system/kubelet.service",
	"/lib/systemd/system/kubelet.service.d/*.conf",
	"/etc/systemd/system/kubelet.service",
	"/etc/systemd/system/kubelet.service.d/*.conf",
}

// ids are an owner: a user and a group.
type ids struct{ uid, gid int }

func (i ids) String() string { return fmt.Sprintf("%d:%d", i.uid, i.gid) }

// process is a running program: its ID and command line.
type process struct {
	pid  int
	args []string
}

// node is what the checks read: the host's files (under its root) and
// its processes (its /proc).
type node struct {
	host *host.Host
	// root is the owner the benchmark wants for most files: root:root
	// on a node; a test's own IDs on a test's tree.
	root  ids
	procs map[string]process
}

// load reads the host's processes: the first of each program the
// benchmark knows, by its command line's first word.
func load(h *host.Host, root ids) (*node, error) {
	n := &node{host: h, root: root, procs: map[string]process{}}
	entries, err := os.ReadDir(h.Path("/proc"))
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	pids := []int{}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	for _, pid := range pids {
		b, err := os.ReadFile(h.Path(fmt.Sprintf("/proc/%d/cmdline", pid)))
		if err != nil {
			continue // gone since the listing, or a kernel thread
		}
		args := splitCmdline(b)
		if len(args) == 0 {
			continue
		}
		name := filepath.Base(args[0])
		switch name {
		case apiServer, controllerManager, scheduler, etcd, kubelet, kubeProxy:
			if _, seen := n.procs[name]; !seen {
				n.procs[name] = process{pid: pid, args: args}
			}
		}
	}
	return n, nil
}

// splitCmdline splits /proc/PID/cmdline, arguments ended by NUL.
func splitCmdline(b []byte) []string {
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// parseFlags reads a command line's flags: --name=value, --name value,
// or --name alone (a boolean, "true"). The last of a repeated flag wins,
// as with the programs' own flag parsing. Words that are no flag's value
// are left out.
func parseFlags(args []string) map[string]string {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			continue
		}
		name := strings.TrimLeft(a, "-")
		if name == "" {
			continue
		}
		if k, v, ok := strings.Cut(name, "="); ok {
			if k != "" {
				flags[k] = v
			}
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			flags[name] = args[i+1]
			i++
			continue
		}
		flags[name] = "true"
	}
	return flags
}

// flags are a running program's flags; ok is false when it does not run.
func (n *node) flags(program string) (map[string]string, bool) {
	p, ok := n.procs[program]
	if !ok {
		return nil, false
	}
	return parseFlags(p.args[1:]), true
}

// processFile is a file as a running program sees it: through its root
// (/proc/PID/root), which for a program in a container is its image and
// mounts.
func (n *node) processFile(program, p string) (string, bool) {
	proc, ok := n.procs[program]
	if !ok {
		return "", false
	}
	return n.host.Path(filepath.Join(fmt.Sprintf("/proc/%d/root", proc.pid), p)), true
}

// fileInfo is a file's mode and owner.
type fileInfo struct {
	mode  fs.FileMode
	owner ids
}

// stat reads the file at the host path p, not following a last symlink.
func (n *node) stat(p string) (fileInfo, error) {
	fi, err := os.Lstat(n.host.Path(p))
	if err != nil {
		return fileInfo{}, err
	}
	return infoOf(fi)
}

func infoOf(fi fs.FileInfo) (fileInfo, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileInfo{}, errors.New("no owner in the file's status")
	}
	return fileInfo{mode: fi.Mode().Perm(), owner: ids{int(st.Uid), int(st.Gid)}}, nil
}

// glob is the host paths a pattern matches, sorted.
func (n *node) glob(pattern string) ([]string, error) {
	matches, err := filepath.Glob(n.host.Path(pattern))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(matches))
	for _, m := range matches {
		out = append(out, n.hostPath(m))
	}
	sort.Strings(out)
	return out, nil
}

// walk is the host path p and everything under it, sorted.
func (n *node) walk(p string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(n.host.Path(p), func(full string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, n.hostPath(full))
		return nil
	})
	return out, err
}

// hostPath is the path on the host of full, a path under the host root.
func (n *node) hostPath(full string) string {
	rel, err := filepath.Rel(n.host.Path("/"), full)
	if err != nil {
		return full
	}
	return "/" + filepath.ToSlash(rel)
}

// etcdIDs are the etcd account's user and group (its /etc/passwd
// entry's).
func (n *node) etcdIDs() (ids, error) {
	u, err := n.host.LookupUser(etcdAccount)
	if err != nil {
		return ids{}, fmt.Errorf("etcd's account: %w", err)
	}
	return ids{u.UID, u.GID}, nil
}

// kubeletSettings are the running kubelet's settings: its flags over its
// configuration file (--config), as the kubelet itself reads them.
type kubeletSettings struct {
	flags      map[string]string
	config     map[string]any
	configFile string
}

func (n *node) kubelet() (*kubeletSettings, error) {
	flags, ok := n.flags(kubelet)
	if !ok {
		return nil, errors.New("the kubelet is not running")
	}
	k := &kubeletSettings{flags: flags, config: map[string]any{}}
	if f := flags["config"]; f != "" {
		k.configFile = f
		b, err := os.ReadFile(n.host.Path(f))
		if err != nil {
			return nil, fmt.Errorf("the kubelet's --config: %w", err)
		}
		cfg, err := parseKubeletConfig(b)
		if err != nil {
			return nil, fmt.Errorf("the kubelet's --config %s: %w", f, err)
		}
		k.config = cfg
	}
	return k, nil
}

// parseKubeletConfig reads a KubeletConfiguration as plain YAML.
func parseKubeletConfig(b []byte) (map[string]any, error) {
	cfg := map[string]any{}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	return cfg, nil
}

// setting is a kubelet setting: its flag if the command line has it,
// else its field in the configuration file (path: the field's keys),
// else def, the kubelet's default with a configuration file. where says
// which it was.
func (k *kubeletSettings) setting(flag string, path []string, def string) (value, where string) {
	if v, ok := k.flags[flag]; ok {
		return v, "flag --" + flag
	}
	var cur any = k.config
	for _, key := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			cur = nil
			break
		}
		cur = m[key]
	}
	field := strings.Join(path, ".")
	switch v := cur.(type) {
	case nil:
		return def, field + " unset (default)"
	case []any:
		parts := make([]string, 0, len(v))
		for _, p := range v {
			parts = append(parts, fmt.Sprint(p))
		}
		return strings.Join(parts, ","), field
	default:
		return fmt.Sprint(v), field
	}
}
