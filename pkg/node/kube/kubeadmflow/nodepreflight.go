package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// stepNodePreflight is the preflight of a worker and of the init node:
// the checks of kubeadm's `join phase preflight` and `init phase
// preflight` that depend on the node's state, made in-process (see
// nodePreflight). The rest are guarantees of the image, listed in
// docs/cluster.md.
const stepNodePreflight = "node preflight"

// kubeadm's ports, as its Port-N checks name them.
const (
	defaultKubeletPort        = 10250
	kubeSchedulerPort         = 10259
	kubeControllerManagerPort = 10257
	etcdClientPort            = 2379
	etcdPeerPort              = 2380
)

// What kubeadm's NumCPU and Mem checks want of a control plane, and where
// the node's figures are read.
const (
	controlPlaneMinCPUs      = 2
	controlPlaneMinMemoryMiB = 1700
	onlineCPUsFile           = "/sys/devices/system/cpu/online"
	memInfoFile              = "/proc/meminfo"
)

// staticPodManifestsDir is where kubeadm writes the control plane's static
// pods.
const staticPodManifestsDir = "/etc/kubernetes/manifests"

// preflightCheck is one of kubeadm's checks, under kubeadm's name, so
// that the config's ignorePreflightErrors names it as it would kubeadm's.
type preflightCheck struct {
	name  string
	check func(h *Flow) error
}

// listenOn is where a Port-N check tries to listen: port itself on a node;
// tests map kubeadm's ports to ports of their own.
type listenOn func(port int) int

// fileAvailable is kubeadm's FileAvailable check: path must not exist.
func fileAvailable(path string) preflightCheck {
	return preflightCheck{
		name: "FileAvailable-" + strings.ReplaceAll(path, "/", "-"),
		check: func(h *Flow) error {
			if _, err := os.Lstat(h.Path(path)); err == nil {
				return fmt.Errorf("%s already exists", path)
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		},
	}
}

// dirAvailable is kubeadm's DirAvailable check: path is absent or empty.
func dirAvailable(path string) preflightCheck {
	return preflightCheck{
		name: "DirAvailable-" + strings.ReplaceAll(path, "/", "-"),
		check: func(h *Flow) error {
			entries, err := os.ReadDir(h.Path(path))
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if len(entries) > 0 {
				return fmt.Errorf("%s is not empty", path)
			}
			return nil
		},
	}
}

// fileContent is kubeadm's FileContent check: path holds want.
func fileContent(path, want string) preflightCheck {
	return preflightCheck{
		name: "FileContent-" + strings.ReplaceAll(path, "/", "-"),
		check: func(h *Flow) error {
			b, err := os.ReadFile(h.Path(path))
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != want {
				return fmt.Errorf("%s contents are not set to %s", path, want)
			}
			return nil
		},
	}
}

// portOpen is kubeadm's Port-N check: nothing listens on port. what says
// who would: "is what running?".
func portOpen(port int, at listenOn, what string) preflightCheck {
	return preflightCheck{name: fmt.Sprintf("Port-%d", port), check: func(*Flow) error {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", at(port)))
		if err != nil {
			return fmt.Errorf("port %d is in use (is %s running?)", port, what)
		}
		return l.Close()
	}}
}

// hostChecks are the checks of the kernel's settings every node's kubeadm
// preflight makes: forwarding and bridge netfilter on (step
// kubernetes-host sets them), swap off.
func hostChecks() []preflightCheck {
	return []preflightCheck{
		fileContent("/proc/sys/net/ipv4/ip_forward", "1"),
		fileContent("/proc/sys/net/bridge/bridge-nf-call-iptables", "1"),
		{name: "Swap", check: func(h *Flow) error {
			b, err := os.ReadFile(h.Path("/proc/swaps"))
			if err != nil {
				return err
			}
			if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) > 1 {
				return fmt.Errorf("swap is on: %s", strings.Join(lines[1:], "; "))
			}
			return nil
		}},
	}
}

// workerChecks are the checks of kubeadm's `join phase preflight` for a
// worker whose outcome the image does not decide: a kubelet credential
// or the cluster CA left from an earlier join, the kubelet's port taken,
// the kernel's forwarding switched off, swap on.
func workerChecks(at listenOn) []preflightCheck {
	return append([]preflightCheck{
		fileAvailable(KubeletKubeconfig),
		fileAvailable(BootstrapKubeconfig),
		fileAvailable(KubernetesPKIDir + "/ca.crt"),
		portOpen(defaultKubeletPort, at, "a kubelet (`systemctl status kubelet`)"),
	}, hostChecks()...)
}

// initChecks are the checks of kubeadm's `init phase preflight` whose
// outcome the image does not decide: too few CPUs or too little memory
// for a control plane, a port of the control plane's or of etcd's taken,
// static pod manifests or etcd data left from an earlier init, and the
// kernel settings of hostChecks. (The CA is not checked: step
// kubernetes-pki has just written the cluster's.)
func initChecks(at listenOn) []preflightCheck {
	checks := []preflightCheck{
		{name: "NumCPU", check: func(h *Flow) error {
			n, err := onlineCPUs(h)
			if err != nil {
				return err
			}
			if n < controlPlaneMinCPUs {
				return fmt.Errorf("the number of available CPUs %d is less than the required %d", n, controlPlaneMinCPUs)
			}
			return nil
		}},
		{name: "Mem", check: func(h *Flow) error {
			mib, err := memTotalMiB(h)
			if err != nil {
				return err
			}
			if mib < controlPlaneMinMemoryMiB {
				return fmt.Errorf("the system RAM (%d MB) is less than the minimum %d MB", mib, controlPlaneMinMemoryMiB)
			}
			return nil
		}},
		portOpen(machineconfig.APIServerPort, at, "a kube-apiserver"),
		portOpen(kubeSchedulerPort, at, "a kube-scheduler"),
		portOpen(kubeControllerManagerPort, at, "a kube-controller-manager"),
		portOpen(defaultKubeletPort, at, "a kubelet (`systemctl status kubelet`)"),
		portOpen(etcdClientPort, at, "an etcd"),
		portOpen(etcdPeerPort, at, "an etcd"),
	}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
		checks = append(checks, fileAvailable(staticPodManifestsDir+"/"+c+".yaml"))
	}
	checks = append(checks, dirAvailable(layout.EtcdDataDir))
	return append(checks, hostChecks()...)
}

// onlineCPUs counts the CPUs the kernel lists online ("0-1,4").
func onlineCPUs(h *Flow) (int, error) {
	b, err := os.ReadFile(h.Path(onlineCPUsFile))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a CPU list", onlineCPUsFile, b)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return 0, fmt.Errorf("%s: %q is not a CPU list", onlineCPUsFile, b)
			}
		}
		n += z - a + 1
	}
	return n, nil
}

// memTotalMiB is /proc/meminfo's MemTotal in MiB.
func memTotalMiB(h *Flow) (int, error) {
	b, err := os.ReadFile(h.Path(memInfoFile))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				break
			}
			return kib / 1024, nil
		}
	}
	return 0, fmt.Errorf("%s has no MemTotal line", memInfoFile)
}

// nodePreflight replaces kubeadm's preflight phase on a worker and on the
// init node. Run as a process of its own, kubeadm's phase made a
// discovery round trip to the API and ran the kubelet binary for its
// version (24.5 s on a worker's critical path under emulation); on the
// init node (4.5 s) it also asks the runtime again for every image step
// "pull images" has just made present. What it checks beyond these checks
// the image guarantees (docs/cluster.md). A check the config's
// ignorePreflightErrors names is reported, not fatal, as with kubeadm.
func nodePreflight(_ context.Context, h *Flow, c *machineconfig.Config) error {
	same := func(port int) int { return port }
	if c.Cluster.Role == machineconfig.RoleInit {
		return runChecks(h, c, initChecks(same))
	}
	return runChecks(h, c, workerChecks(same))
}

func runChecks(h *Flow, c *machineconfig.Config, checks []preflightCheck) error {
	var failed []string
	for _, chk := range checks {
		err := chk.check(h)
		if err == nil {
			continue
		}
		if ignored(c.Cluster.IgnorePreflightErrors, chk.name) {
			h.Report.Report(stepNodePreflight, step.Warning, fmt.Sprintf("[WARNING %s]: %v (named in cluster.ignorePreflightErrors)", chk.name, err))
			continue
		}
		failed = append(failed, fmt.Sprintf("[ERROR %s]: %v", chk.name, err))
	}
	if len(failed) > 0 {
		return fmt.Errorf("preflight: %s (to report a check as a warning instead, name it in the machine config's cluster.ignorePreflightErrors)", strings.Join(failed, "; "))
	}
	return nil
}

// ignored reports whether names ignores check (kubeadm compares its
// checks' names case-insensitively; the config refuses "all").
func ignored(names []string, check string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, check) })
}
