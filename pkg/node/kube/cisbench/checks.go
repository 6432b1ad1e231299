package cisbench

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// verdict is a check's outcome and what was found.
type verdict struct {
	status Status
	detail string
}

func passf(format string, a ...any) verdict { return verdict{Pass, fmt.Sprintf(format, a...)} }
func failf(format string, a ...any) verdict { return verdict{Fail, fmt.Sprintf(format, a...)} }
func naf(format string, a ...any) verdict   { return verdict{NotApplicable, fmt.Sprintf(format, a...)} }

// check is one of the benchmark's checks.
type check struct {
	id, title string
	automated bool
	// everyNode: the check applies to workers too (section 4); the
	// others only to control planes.
	everyNode bool
	run       func(n *node) verdict
}

// files names the host files a check reads; none is the verdict when it
// finds none (nil: a fail, "not found").
type files func(n *node) (paths []string, none *verdict)

// file is one fixed path.
func file(p string) files {
	return func(n *node) ([]string, *verdict) { return []string{p}, nil }
}

// globs are the paths the patterns match; none when they match nothing.
func globs(none verdict, patterns ...string) files {
	return func(n *node) ([]string, *verdict) {
		var out []string
		for _, p := range patterns {
			m, err := n.glob(p)
			if err != nil {
				v := failf("%s: %v", p, err)
				return nil, &v
			}
			out = append(out, m...)
		}
		if len(out) == 0 {
			return nil, &none
		}
		return out, nil
	}
}

// tree is a directory and everything in it.
func tree(dir string) files {
	return func(n *node) ([]string, *verdict) {
		out, err := n.walk(dir)
		if err != nil {
			v := failf("%s: %v", dir, err)
			return nil, &v
		}
		return out, nil
	}
}

// statAll stats every path; a missing one is a fail that names it.
func statAll(n *node, fn files) (map[string]fileInfo, []string, *verdict) {
	paths, none := fn(n)
	if none != nil {
		return nil, nil, none
	}
	infos := map[string]fileInfo{}
	for _, p := range paths {
		fi, err := n.stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			v := failf("%s not found", p)
			return nil, nil, &v
		}
		if err != nil {
			v := failf("%s: %v", p, err)
			return nil, nil, &v
		}
		infos[p] = fi
	}
	return infos, paths, nil
}

// describe names a few paths, or says how many there were and where.
func describe(paths []string) string {
	if len(paths) <= 4 {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%d files under %s", len(paths), commonDir(paths))
}

// commonDir is the directory all paths are in (or are).
func commonDir(paths []string) string {
	dir := paths[0]
	for _, p := range paths {
		for p != dir && !strings.HasPrefix(p, dir+"/") && dir != "/" {
			dir = filepath.Dir(dir)
		}
	}
	return dir
}

// modeAtMost passes when no file has a permission bit beyond max
// ("600 or more restrictive").
func modeAtMost(fn files, maxMode fs.FileMode) func(*node) verdict {
	return func(n *node) verdict {
		infos, paths, v := statAll(n, fn)
		if v != nil {
			return *v
		}
		var bad []string
		for _, p := range paths {
			if fi := infos[p]; fi.mode&^maxMode != 0 {
				bad = append(bad, fmt.Sprintf("%s is %04o", p, fi.mode))
			}
		}
		if len(bad) > 0 {
			return failf("%s: chmod %o", strings.Join(bad, ", "), maxMode)
		}
		if len(paths) == 1 {
			return passf("%s %04o", paths[0], infos[paths[0]].mode)
		}
		return passf("%s: each %04o or tighter", describe(paths), maxMode)
	}
}

// owner is who a check wants to own the files: root, or etcd's account.
type owner func(n *node) (ids, string, error)

func rootOwner(n *node) (ids, string, error) { return n.root, "root:root", nil }

func etcdOwner(n *node) (ids, string, error) {
	i, err := n.etcdIDs()
	return i, "etcd:etcd", err
}

// ownedBy passes when every file and directory is the owner's.
func ownedBy(fn files, who owner) func(*node) verdict {
	return func(n *node) verdict {
		want, name, err := who(n)
		if err != nil {
			return failf("%v", err)
		}
		infos, paths, v := statAll(n, fn)
		if v != nil {
			return *v
		}
		var bad []string
		for _, p := range paths {
			if got := infos[p].owner; got != want {
				bad = append(bad, fmt.Sprintf("%s is %s's", p, got))
			}
		}
		if len(bad) > 0 {
			return failf("%s: chown %s (%s)", strings.Join(bad, ", "), name, want)
		}
		return passf("%s: %s", describe(paths), name)
	}
}

// fromFlag is the file a program's flag names, or def when unset.
func fromFlag(program, flag, def string) files {
	return func(n *node) ([]string, *verdict) {
		f, ok := n.flags(program)
		if !ok {
			v := failf("%s is not running", program)
			return nil, &v
		}
		if p := f[flag]; p != "" {
			return []string{p}, nil
		}
		return []string{def}, nil
	}
}

// kubeletFile is the file a kubelet setting names.
func kubeletFile(flag string, path []string, def string) files {
	return func(n *node) ([]string, *verdict) {
		k, err := n.kubelet()
		if err != nil {
			v := failf("%v", err)
			return nil, &v
		}
		p, where := k.setting(flag, path, def)
		if p == "" {
			v := failf("%s names no file", where)
			return nil, &v
		}
		return []string{p}, nil
	}
}

// flagTest decides a check from a program's flags.
type flagTest func(flags map[string]string) verdict

// onFlags runs t on program's flags; a program that is not running
// fails.
func onFlags(program string, t flagTest) func(*node) verdict {
	return func(n *node) verdict {
		f, ok := n.flags(program)
		if !ok {
			return failf("%s is not running", program)
		}
		return t(f)
	}
}

// flagValue is a flag's value and how to show it; def when unset.
func flagValue(f map[string]string, name, def string) (string, string) {
	if v, ok := f[name]; ok {
		return v, fmt.Sprintf("--%s=%s", name, v)
	}
	return def, fmt.Sprintf("--%s unset (default %q)", name, def)
}

// flagIs passes when the flag (or its default) is want.
func flagIs(name, want, def string) flagTest {
	return func(f map[string]string) verdict {
		v, shown := flagValue(f, name, def)
		if strings.EqualFold(v, want) {
			return passf("%s", shown)
		}
		return failf("%s: set --%s=%s", shown, name, want)
	}
}

// flagNot passes when the flag (or its default) is not bad.
func flagNot(name, bad, def string) flagTest {
	return func(f map[string]string) verdict {
		v, shown := flagValue(f, name, def)
		if strings.EqualFold(v, bad) {
			return failf("%s: drop it or set another value", shown)
		}
		return passf("%s", shown)
	}
}

// flagsSet passes when every flag is set to something.
func flagsSet(names ...string) flagTest {
	return func(f map[string]string) verdict {
		var shown, missing []string
		for _, name := range names {
			if v := f[name]; v != "" {
				shown = append(shown, fmt.Sprintf("--%s=%s", name, v))
			} else {
				missing = append(missing, "--"+name)
			}
		}
		if len(missing) > 0 {
			return failf("%s unset: set it", strings.Join(missing, " and "))
		}
		return passf("%s", strings.Join(shown, " "))
	}
}

// flagUnset passes when the flag is not set.
func flagUnset(name string) flagTest {
	return func(f map[string]string) verdict {
		if v, ok := f[name]; ok {
			return failf("--%s=%s: remove it", name, v)
		}
		return passf("--%s unset", name)
	}
}

// listHas passes when the comma-separated flag (or its default) holds
// item; without, when it does not.
func listHas(name, item, def string, without bool) flagTest {
	return func(f map[string]string) verdict {
		v, shown := flagValue(f, name, def)
		has := false
		for _, e := range strings.Split(v, ",") {
			if strings.TrimSpace(e) == item {
				has = true
			}
		}
		switch {
		case has && !without:
			return passf("%s", shown)
		case !has && without:
			return passf("%s", shown)
		case without:
			return failf("%s: take %s out", shown, item)
		default:
			return failf("%s: add %s", shown, item)
		}
	}
}

// flagAtLeast passes when the numeric flag is set to min or more.
func flagAtLeast(name string, minimum int) flagTest {
	return func(f map[string]string) verdict {
		v, ok := f[name]
		if !ok {
			return failf("--%s unset: set it to %d or more", name, minimum)
		}
		var got int
		if _, err := fmt.Sscan(v, &got); err != nil || got < minimum {
			return failf("--%s=%s: set it to %d or more", name, v, minimum)
		}
		return passf("--%s=%s", name, v)
	}
}

// kubeletTest decides a check from the kubelet's settings.
func kubeletTest(t func(k *kubeletSettings) verdict) func(*node) verdict {
	return func(n *node) verdict {
		k, err := n.kubelet()
		if err != nil {
			return failf("%v", err)
		}
		return t(k)
	}
}

// kubeletIs passes when the setting is want.
func kubeletIs(flag string, path []string, def, want string) func(*node) verdict {
	return kubeletTest(func(k *kubeletSettings) verdict {
		v, where := k.setting(flag, path, def)
		if strings.EqualFold(v, want) {
			return passf("%s: %s", where, v)
		}
		return failf("%s: %s: set %s: %s", where, v, strings.Join(path, "."), want)
	})
}

// kubeletNot passes when the setting is not bad.
func kubeletNot(flag string, path []string, def, bad string) func(*node) verdict {
	return kubeletTest(func(k *kubeletSettings) verdict {
		v, where := k.setting(flag, path, def)
		if strings.EqualFold(v, bad) {
			return failf("%s: %s: set %s to another value", where, v, strings.Join(path, "."))
		}
		return passf("%s: %s", where, v)
	})
}

// strongCiphers are the TLS cipher suites the benchmark calls strong:
// ECDHE key exchange with an AEAD cipher, and TLS 1.3's.
var strongCiphers = map[string]bool{
	"TLS_AES_128_GCM_SHA256":                        true,
	"TLS_AES_256_GCM_SHA384":                        true,
	"TLS_CHACHA20_POLY1305_SHA256":                  true,
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256":       true,
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384":       true,
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305":        true,
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": true,
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256":         true,
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384":         true,
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305":          true,
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256":   true,
}

// onlyStrong passes when list is set and every suite in it is strong.
func onlyStrong(list, where string) verdict {
	if list == "" {
		return failf("%s unset (Go's defaults include CBC suites): set only ECDHE with AES-GCM or ChaCha20-Poly1305", where)
	}
	var weak []string
	for _, c := range strings.Split(list, ",") {
		if c = strings.TrimSpace(c); !strongCiphers[c] {
			weak = append(weak, c)
		}
	}
	if len(weak) > 0 {
		return failf("%s has %s: take them out", where, strings.Join(weak, ", "))
	}
	return passf("%s: %d suites, each ECDHE with an AEAD cipher", where, len(strings.Split(list, ",")))
}

// loopback reports whether an address's host is a loopback one.
func loopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		h = addr
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// manifest is a control-plane static pod's manifest.
func manifest(program string) files { return file(manifestsDir + "/" + program + ".yaml") }

// etcdData is etcd's data directory, by its --data-dir.
func etcdData() files { return fromFlag(etcd, "data-dir", etcdDataDir) }

// kubeletUnits are the kubelet's unit and drop-ins that are there.
func kubeletUnits() files {
	return globs(failf("no kubelet unit found (looked in %s)", strings.Join(kubeletUnitGlobs, ", ")), kubeletUnitGlobs...)
}

var (
	anonymousPath = []string{"authentication", "anonymous", "enabled"}
	clientCAPath  = []string{"authentication", "x509", "clientCAFile"}
)

// checks are the benchmark's sections 1 to 4 (control plane, etcd,
// control-plane configuration, worker node), in its order.
func checks() []check {
	cp := func(id, title string, automated bool, run func(*node) verdict) check {
		return check{id: id, title: title, automated: automated, run: run}
	}
	every := func(id, title string, automated bool, run func(*node) verdict) check {
		return check{id: id, title: title, automated: automated, everyNode: true, run: run}
	}
	cni := globs(naf("no CNI configuration in %s", cniDir), cniDir+"/*")
	admin := globs(failf("no /etc/kubernetes/admin.conf"), "/etc/kubernetes/admin.conf", "/etc/kubernetes/super-admin.conf")
	return []check{
		cp("1.1.1", "API server manifest mode 600 or tighter", true, modeAtMost(manifest(apiServer), 0o600)),
		cp("1.1.2", "API server manifest owned by root:root", true, ownedBy(manifest(apiServer), rootOwner)),
		cp("1.1.3", "controller manager manifest mode 600 or tighter", true, modeAtMost(manifest(controllerManager), 0o600)),
		cp("1.1.4", "controller manager manifest owned by root:root", true, ownedBy(manifest(controllerManager), rootOwner)),
		cp("1.1.5", "scheduler manifest mode 600 or tighter", true, modeAtMost(manifest(scheduler), 0o600)),
		cp("1.1.6", "scheduler manifest owned by root:root", true, ownedBy(manifest(scheduler), rootOwner)),
		cp("1.1.7", "etcd manifest mode 600 or tighter", true, modeAtMost(manifest(etcd), 0o600)),
		cp("1.1.8", "etcd manifest owned by root:root", true, ownedBy(manifest(etcd), rootOwner)),
		cp("1.1.9", "CNI files mode 600 or tighter", false, modeAtMost(cni, 0o600)),
		cp("1.1.10", "CNI files owned by root:root", false, ownedBy(cni, rootOwner)),
		cp("1.1.11", "etcd data directory mode 700 or tighter", true, modeAtMost(etcdData(), 0o700)),
		cp("1.1.12", "etcd data directory owned by etcd:etcd", true, ownedBy(etcdData(), etcdOwner)),
		cp("1.1.13", "admin kubeconfigs mode 600 or tighter", true, modeAtMost(admin, 0o600)),
		cp("1.1.14", "admin kubeconfigs owned by root:root", true, ownedBy(admin, rootOwner)),
		cp("1.1.15", "scheduler.conf mode 600 or tighter", true, modeAtMost(file("/etc/kubernetes/scheduler.conf"), 0o600)),
		cp("1.1.16", "scheduler.conf owned by root:root", true, ownedBy(file("/etc/kubernetes/scheduler.conf"), rootOwner)),
		cp("1.1.17", "controller-manager.conf mode 600 or tighter", true, modeAtMost(file("/etc/kubernetes/controller-manager.conf"), 0o600)),
		cp("1.1.18", "controller-manager.conf owned by root:root", true, ownedBy(file("/etc/kubernetes/controller-manager.conf"), rootOwner)),
		cp("1.1.19", "PKI directory and files owned by root:root", true, ownedBy(tree(pkiDir), rootOwner)),
		cp("1.1.20", "PKI certificates mode 644 or tighter", false, modeAtMost(globs(failf("no certificates in %s", pkiDir), pkiDir+"/*.crt", pkiDir+"/*/*.crt"), 0o644)),
		cp("1.1.21", "PKI keys mode 600", false, modeAtMost(globs(failf("no keys in %s", pkiDir), pkiDir+"/*.key", pkiDir+"/*/*.key"), 0o600)),

		cp("1.2.1", "API server --anonymous-auth=false", false, onFlags(apiServer, anonymousAPI)),
		cp("1.2.2", "API server --token-auth-file not set", true, onFlags(apiServer, flagUnset("token-auth-file"))),
		cp("1.2.3", "admission plugin DenyServiceExternalIPs", false, onFlags(apiServer, listHas("enable-admission-plugins", "DenyServiceExternalIPs", "", false))),
		cp("1.2.4", "API server --kubelet-client-certificate and key", true, onFlags(apiServer, flagsSet("kubelet-client-certificate", "kubelet-client-key"))),
		cp("1.2.5", "API server --kubelet-certificate-authority", true, onFlags(apiServer, flagsSet("kubelet-certificate-authority"))),
		cp("1.2.6", "API server --authorization-mode not AlwaysAllow", true, onFlags(apiServer, listHas("authorization-mode", "AlwaysAllow", "AlwaysAllow", true))),
		cp("1.2.7", "API server --authorization-mode includes Node", true, onFlags(apiServer, listHas("authorization-mode", "Node", "AlwaysAllow", false))),
		cp("1.2.8", "API server --authorization-mode includes RBAC", true, onFlags(apiServer, listHas("authorization-mode", "RBAC", "AlwaysAllow", false))),
		cp("1.2.9", "admission plugin EventRateLimit", false, onFlags(apiServer, listHas("enable-admission-plugins", "EventRateLimit", "", false))),
		cp("1.2.10", "admission plugin AlwaysAdmit not set", true, onFlags(apiServer, listHas("enable-admission-plugins", "AlwaysAdmit", "", true))),
		cp("1.2.11", "admission plugin AlwaysPullImages", false, func(*node) verdict {
			return naf("every image comes from the node's own registry, which serves only the slot's bundle and signed side-loads: a pod cannot use another tenant's pulled image it could not pull itself, and a pull would reach nothing outside")
		}),
		cp("1.2.12", "admission plugin ServiceAccount not disabled", true, onFlags(apiServer, listHas("disable-admission-plugins", "ServiceAccount", "", true))),
		cp("1.2.13", "admission plugin NamespaceLifecycle not disabled", true, onFlags(apiServer, listHas("disable-admission-plugins", "NamespaceLifecycle", "", true))),
		cp("1.2.14", "admission plugin NodeRestriction", true, onFlags(apiServer, listHas("enable-admission-plugins", "NodeRestriction", "", false))),
		cp("1.2.15", "API server --profiling=false", true, onFlags(apiServer, flagIs("profiling", "false", "true"))),
		cp("1.2.16", "API server --audit-log-path", true, onFlags(apiServer, flagsSet("audit-log-path"))),
		cp("1.2.17", "API server --audit-log-maxage 30 or more", true, onFlags(apiServer, flagAtLeast("audit-log-maxage", 30))),
		cp("1.2.18", "API server --audit-log-maxbackup 10 or more", true, onFlags(apiServer, flagAtLeast("audit-log-maxbackup", 10))),
		cp("1.2.19", "API server --audit-log-maxsize 100 or more", true, onFlags(apiServer, flagAtLeast("audit-log-maxsize", 100))),
		cp("1.2.20", "API server --request-timeout as appropriate", false, onFlags(apiServer, func(f map[string]string) verdict {
			_, shown := flagValue(f, "request-timeout", "1m0s")
			return naf("%s: a judgement, not a setting; a minute suits a plant's cluster (no long uploads through the API)", shown)
		})),
		cp("1.2.21", "API server --service-account-lookup=true", true, onFlags(apiServer, flagIs("service-account-lookup", "true", "true"))),
		cp("1.2.22", "API server --service-account-key-file", true, onFlags(apiServer, flagsSet("service-account-key-file"))),
		cp("1.2.23", "API server --etcd-certfile and --etcd-keyfile", true, onFlags(apiServer, flagsSet("etcd-certfile", "etcd-keyfile"))),
		cp("1.2.24", "API server --tls-cert-file and --tls-private-key-file", true, onFlags(apiServer, flagsSet("tls-cert-file", "tls-private-key-file"))),
		cp("1.2.25", "API server --client-ca-file", true, onFlags(apiServer, flagsSet("client-ca-file"))),
		cp("1.2.26", "API server --etcd-cafile", true, onFlags(apiServer, flagsSet("etcd-cafile"))),
		cp("1.2.27", "API server --encryption-provider-config", false, onFlags(apiServer, flagsSet("encryption-provider-config"))),
		cp("1.2.28", "encryption providers configured", false, encryptionProviders),
		cp("1.2.29", "API server strong cipher suites only", false, onFlags(apiServer, func(f map[string]string) verdict {
			return onlyStrong(f["tls-cipher-suites"], "--tls-cipher-suites")
		})),
		cp("1.2.30", "API server --service-account-extend-token-expiration=false", true, onFlags(apiServer, flagIs("service-account-extend-token-expiration", "false", "true"))),

		cp("1.3.1", "controller manager --terminated-pod-gc-threshold", false, onFlags(controllerManager, flagsSet("terminated-pod-gc-threshold"))),
		cp("1.3.2", "controller manager --profiling=false", true, onFlags(controllerManager, flagIs("profiling", "false", "true"))),
		cp("1.3.3", "controller manager --use-service-account-credentials=true", true, onFlags(controllerManager, flagIs("use-service-account-credentials", "true", "false"))),
		cp("1.3.4", "controller manager --service-account-private-key-file", true, onFlags(controllerManager, flagsSet("service-account-private-key-file"))),
		cp("1.3.5", "controller manager --root-ca-file", true, onFlags(controllerManager, flagsSet("root-ca-file"))),
		cp("1.3.6", "controller manager RotateKubeletServerCertificate on", true, onFlags(controllerManager, featureGateOn("RotateKubeletServerCertificate"))),
		cp("1.3.7", "controller manager --bind-address=127.0.0.1", true, onFlags(controllerManager, flagIs("bind-address", "127.0.0.1", "0.0.0.0"))),
		cp("1.4.1", "scheduler --profiling=false", true, onFlags(scheduler, flagIs("profiling", "false", "true"))),
		cp("1.4.2", "scheduler --bind-address=127.0.0.1", true, onFlags(scheduler, flagIs("bind-address", "127.0.0.1", "0.0.0.0"))),

		cp("2.1", "etcd --cert-file and --key-file", true, onFlags(etcd, flagsSet("cert-file", "key-file"))),
		cp("2.2", "etcd --client-cert-auth=true", true, onFlags(etcd, flagIs("client-cert-auth", "true", "false"))),
		cp("2.3", "etcd --auto-tls not true", true, onFlags(etcd, flagNot("auto-tls", "true", "false"))),
		cp("2.4", "etcd --peer-cert-file and --peer-key-file", true, onFlags(etcd, flagsSet("peer-cert-file", "peer-key-file"))),
		cp("2.5", "etcd --peer-client-cert-auth=true", true, onFlags(etcd, flagIs("peer-client-cert-auth", "true", "false"))),
		cp("2.6", "etcd --peer-auto-tls not true", true, onFlags(etcd, flagNot("peer-auto-tls", "true", "false"))),
		cp("2.7", "etcd's CA is not the cluster's", false, uniqueEtcdCA),

		cp("3.2.1", "a minimal audit policy", false, auditPolicy),

		every("4.1.1", "kubelet unit files mode 600 or tighter", true, modeAtMost(kubeletUnits(), 0o600)),
		every("4.1.2", "kubelet unit files owned by root:root", true, ownedBy(kubeletUnits(), rootOwner)),
		every("4.1.3", "proxy kubeconfig mode 600 or tighter, if a file", false, proxyKubeconfig),
		every("4.1.4", "proxy kubeconfig owned by root:root, if a file", false, proxyKubeconfig),
		every("4.1.5", "kubelet.conf mode 600 or tighter", true, modeAtMost(fromFlag(kubelet, "kubeconfig", kubeletKubconfig), 0o600)),
		every("4.1.6", "kubelet.conf owned by root:root", true, ownedBy(fromFlag(kubelet, "kubeconfig", kubeletKubconfig), rootOwner)),
		every("4.1.7", "kubelet client CA file mode 644 or tighter", false, modeAtMost(kubeletFile("client-ca-file", clientCAPath, ""), 0o644)),
		every("4.1.8", "kubelet client CA file owned by root:root", false, ownedBy(kubeletFile("client-ca-file", clientCAPath, ""), rootOwner)),
		every("4.1.9", "kubelet config.yaml mode 600 or tighter", true, modeAtMost(fromFlag(kubelet, "config", kubeletConfig), 0o600)),
		every("4.1.10", "kubelet config.yaml owned by root:root", true, ownedBy(fromFlag(kubelet, "config", kubeletConfig), rootOwner)),

		every("4.2.1", "kubelet anonymous auth off", true, kubeletIs("anonymous-auth", anonymousPath, "false", "false")),
		every("4.2.2", "kubelet authorization mode not AlwaysAllow", true, kubeletNot("authorization-mode", []string{"authorization", "mode"}, "Webhook", "AlwaysAllow")),
		every("4.2.3", "kubelet client CA file set", true, kubeletTest(func(k *kubeletSettings) verdict {
			v, where := k.setting("client-ca-file", clientCAPath, "")
			if v == "" {
				return failf("%s: set it to the cluster CA's certificate", where)
			}
			return passf("%s: %s", where, v)
		})),
		every("4.2.4", "kubelet read-only port 0", false, kubeletIs("read-only-port", []string{"readOnlyPort"}, "0", "0")),
		every("4.2.5", "kubelet streaming idle timeout not 0", false, kubeletTest(func(k *kubeletSettings) verdict {
			v, where := k.setting("streaming-connection-idle-timeout", []string{"streamingConnectionIdleTimeout"}, "4h0m0s")
			if v == "0" || v == "0s" {
				return failf("%s: %s: set a timeout such as 5m", where, v)
			}
			return passf("%s: %s", where, v)
		})),
		every("4.2.6", "kubelet makes its iptables chains", true, kubeletIs("make-iptables-util-chains", []string{"makeIPTablesUtilChains"}, "true", "true")),
		every("4.2.7", "kubelet --hostname-override not set", false, kubeletTest(func(k *kubeletSettings) verdict {
			if v, ok := k.flags["hostname-override"]; ok {
				return failf("--hostname-override=%s: name the node by its host name instead", v)
			}
			return passf("--hostname-override unset")
		})),
		every("4.2.8", "kubelet eventRecordQPS captures events", false, kubeletTest(func(k *kubeletSettings) verdict {
			v, where := k.setting("event-qps", []string{"eventRecordQPS"}, "50")
			if v == "0" {
				return failf("%s: 0 (unlimited): set a rate such as 5", where)
			}
			return passf("%s: %s", where, v)
		})),
		every("4.2.9", "kubelet serving certificate set", false, kubeletTest(func(k *kubeletSettings) verdict {
			if v, where := k.setting("", []string{"serverTLSBootstrap"}, "false"); v == "true" {
				return passf("%s: true (a certificate of the cluster CA, asked for and renewed by the kubelet)", where)
			}
			cert, _ := k.setting("tls-cert-file", []string{"tlsCertFile"}, "")
			key, _ := k.setting("tls-private-key-file", []string{"tlsPrivateKeyFile"}, "")
			if cert == "" || key == "" {
				return failf("no serving certificate: set serverTLSBootstrap: true, or tlsCertFile and tlsPrivateKeyFile")
			}
			return passf("tlsCertFile %s, tlsPrivateKeyFile %s", cert, key)
		})),
		every("4.2.10", "kubelet rotates its certificates", true, kubeletNot("rotate-certificates", []string{"rotateCertificates"}, "false", "false")),
		every("4.2.11", "kubelet RotateKubeletServerCertificate on", false, kubeletTest(func(k *kubeletSettings) verdict {
			if gate, where := k.setting("", []string{"featureGates", "RotateKubeletServerCertificate"}, "true"); gate == "false" {
				return failf("%s: false: remove it", where)
			}
			v, where := k.setting("", []string{"serverTLSBootstrap"}, "false")
			if v != "true" {
				return failf("%s: %s: set serverTLSBootstrap: true", where, v)
			}
			return passf("%s: true, feature gate on", where)
		})),
		every("4.2.12", "kubelet strong cipher suites only", false, kubeletTest(func(k *kubeletSettings) verdict {
			v, where := k.setting("tls-cipher-suites", []string{"tlsCipherSuites"}, "")
			return onlyStrong(v, where)
		})),
		every("4.2.13", "kubelet pod PID limit", false, kubeletTest(func(k *kubeletSettings) verdict {
			v, where := k.setting("pod-max-pids", []string{"podPidsLimit"}, "-1")
			if v == "-1" || v == "0" {
				return failf("%s: %s (unlimited): set podPidsLimit", where, v)
			}
			return passf("%s: %s", where, v)
		})),
		every("4.2.14", "kubelet seccomp default on", false, kubeletIs("seccomp-default", []string{"seccompDefault"}, "false", "true")),
		every("4.3.1", "kube-proxy metrics on loopback", true, proxyMetrics),
	}
}

// anonymousAPI is 1.2.1. kubeadm's liveness, readiness and startup probes
// call kube-apiserver without credentials, so anonymous requests stay
// on; what an anonymous caller may do is RBAC's, which allows only the
// health and version endpoints (system:public-info-viewer).
func anonymousAPI(f map[string]string) verdict {
	v, shown := flagValue(f, "anonymous-auth", "true")
	if v == "false" {
		return passf("%s", shown)
	}
	if f["authorization-mode"] == "" || strings.Contains(f["authorization-mode"], "AlwaysAllow") {
		return failf("%s and authorization is not RBAC: set --anonymous-auth=false", shown)
	}
	return naf("%s: kubeadm's probes reach /livez, /readyz and /healthz without credentials; RBAC lets system:anonymous read only those and /version", shown)
}

// featureGateOn passes when the feature gate is not switched off.
func featureGateOn(gate string) flagTest {
	return func(f map[string]string) verdict {
		for _, g := range strings.Split(f["feature-gates"], ",") {
			if k, v, _ := strings.Cut(strings.TrimSpace(g), "="); k == gate && strings.EqualFold(v, "false") {
				return failf("--feature-gates=%s: remove %s=false", f["feature-gates"], gate)
			}
		}
		return passf("%s on (its default; --feature-gates does not turn it off)", gate)
	}
}

// apiServerFile is the file kube-apiserver's flag names, read; unset says
// what it means that the flag is not set. A non-nil verdict is the
// check's fail.
func apiServerFile(n *node, flag, unset string) (string, []byte, *verdict) {
	f, ok := n.flags(apiServer)
	if !ok {
		v := failf("%s is not running", apiServer)
		return "", nil, &v
	}
	p := f[flag]
	if p == "" {
		v := failf("--%s unset: %s", flag, unset)
		return "", nil, &v
	}
	b, err := os.ReadFile(n.host.Path(p))
	if err != nil {
		v := failf("%s: %v", p, err)
		return p, nil, &v
	}
	return p, b, nil
}

// encryptionConfig is what 1.2.28 reads of an EncryptionConfiguration.
type encryptionConfig struct {
	Kind      string `yaml:"kind"`
	Resources []struct {
		Resources []string         `yaml:"resources"`
		Providers []map[string]any `yaml:"providers"`
	} `yaml:"resources"`
}

// encryptionProviders is 1.2.28: Secrets written with aescbc, aesgcm,
// secretbox or kms (the first provider of the entry naming secrets is
// the one that writes).
func encryptionProviders(n *node) verdict {
	p, b, v := apiServerFile(n, "encryption-provider-config", "Secrets are stored in plain text")
	if v != nil {
		return *v
	}
	var c encryptionConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		return failf("%s: %v", p, err)
	}
	for _, r := range c.Resources {
		for _, res := range r.Resources {
			if res != "secrets" && res != "*.*" {
				continue
			}
			if len(r.Providers) == 0 {
				return failf("%s: no provider for %s", p, res)
			}
			for name := range r.Providers[0] {
				switch name {
				case "aescbc", "aesgcm", "secretbox", "kms":
					return passf("%s: %s written with %s", p, res, name)
				default:
					return failf("%s: %s written with %s: put aescbc, secretbox or kms first", p, res, name)
				}
			}
		}
	}
	return failf("%s: no entry for secrets", p)
}

// uniqueEtcdCA is 2.7: etcd trusts a CA of its own, not the one that
// signs the cluster's clients (else any client certificate would reach
// etcd).
func uniqueEtcdCA(n *node) verdict {
	ef, ok := n.flags(etcd)
	if !ok {
		return failf("etcd is not running")
	}
	af, ok := n.flags(apiServer)
	if !ok {
		return failf("%s is not running", apiServer)
	}
	etcdCA, clusterCA := ef["trusted-ca-file"], af["client-ca-file"]
	if etcdCA == "" || clusterCA == "" {
		return failf("etcd --trusted-ca-file %q, API server --client-ca-file %q: set both", etcdCA, clusterCA)
	}
	a, err1 := os.ReadFile(n.host.Path(etcdCA))
	b, err2 := os.ReadFile(n.host.Path(clusterCA))
	if err := errors.Join(err1, err2); err != nil {
		return failf("%v", err)
	}
	if string(a) == string(b) {
		return failf("etcd's %s is the cluster CA %s: give etcd a CA of its own", etcdCA, clusterCA)
	}
	return passf("etcd trusts %s, not the cluster CA %s", etcdCA, clusterCA)
}

// auditPolicy is 3.2.1: an audit policy with rules, and a log.
func auditPolicy(n *node) verdict {
	p, b, v := apiServerFile(n, "audit-policy-file", "no API call is audited")
	if v != nil {
		return *v
	}
	var policy struct {
		Kind  string           `yaml:"kind"`
		Rules []map[string]any `yaml:"rules"`
	}
	if err := yaml.Unmarshal(b, &policy); err != nil {
		return failf("%s: %v", p, err)
	}
	if policy.Kind != "Policy" || len(policy.Rules) == 0 {
		return failf("%s: no audit rules", p)
	}
	f, _ := n.flags(apiServer)
	return passf("%s: %d rules, log %s", p, len(policy.Rules), f["audit-log-path"])
}

// proxyKubeconfig is 4.1.3 and 4.1.4. kubeadm runs kube-proxy as a pod
// whose kubeconfig is a ConfigMap: no file on the host to protect. It is
// not applicable as long as that kubeconfig holds no credential (kube-proxy
// authenticates with its service account's token, a file of the pod).
func proxyKubeconfig(n *node) verdict {
	f, ok := n.flags(kubeProxy)
	if !ok {
		return failf("kube-proxy is not running")
	}
	kc := f["kubeconfig"]
	if kc == "" {
		cfg, err := n.proxyConfig(f)
		if err != nil {
			return failf("%v", err)
		}
		if cc, ok := cfg["clientConnection"].(map[string]any); ok {
			kc, _ = cc["kubeconfig"].(string)
		}
	}
	if kc == "" {
		return naf("kube-proxy uses its pod's service account: no kubeconfig")
	}
	p, _ := n.processFile(kubeProxy, kc)
	b, err := os.ReadFile(p)
	if err != nil {
		return failf("kube-proxy's kubeconfig %s: %v", kc, err)
	}
	for _, secret := range []string{"client-key-data:", "client-key:", "token:", "password:"} {
		if strings.Contains(string(b), secret) {
			return failf("kube-proxy's kubeconfig %s holds a credential (%s) in a pod's ConfigMap: use a service account token", kc, strings.TrimSuffix(secret, ":"))
		}
	}
	return naf("kube-proxy runs in a pod: its kubeconfig %s is a ConfigMap holding no credential (it authenticates with its service account's token), not a file on the host", kc)
}

// proxyConfig is kube-proxy's configuration file (--config), read through
// its pod's root; empty without one.
func (n *node) proxyConfig(f map[string]string) (map[string]any, error) {
	cfg := map[string]any{}
	if f["config"] == "" {
		return cfg, nil
	}
	p, _ := n.processFile(kubeProxy, f["config"])
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy's --config %s: %w", f["config"], err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("kube-proxy's --config %s: %w", f["config"], err)
	}
	return cfg, nil
}

// proxyMetrics is 4.3.1: kube-proxy serves its metrics on loopback only
// (its default, 127.0.0.1:10249).
func proxyMetrics(n *node) verdict {
	f, ok := n.flags(kubeProxy)
	if !ok {
		return failf("kube-proxy is not running")
	}
	addr, where := f["metrics-bind-address"], "--metrics-bind-address"
	if addr == "" {
		cfg, err := n.proxyConfig(f)
		if err != nil {
			return failf("%v", err)
		}
		addr, _ = cfg["metricsBindAddress"].(string)
		where = "metricsBindAddress"
	}
	if addr == "" {
		addr, where = "127.0.0.1:10249", "metricsBindAddress unset (default)"
	}
	if !loopback(addr) {
		return failf("%s: %s: set 127.0.0.1:10249", where, addr)
	}
	return passf("%s: %s", where, addr)
}
