package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// stepNodePreflight is a worker's preflight: the checks of kubeadm's
// `join phase preflight` that depend on the node's state, made in-process
// (see workerPreflight). The rest are guarantees of the image, listed in
// docs/cluster.md.
const stepNodePreflight = "node preflight"

// defaultKubeletPort is the port the kubelet serves on.
const defaultKubeletPort = 10250

// preflightCheck is one of kubeadm's join checks, under kubeadm's name, so
// that the config's ignorePreflightErrors names it as it would kubeadm's.
type preflightCheck struct {
	name  string
	check func(h *Flow) error
}

// workerChecks are the checks of kubeadm's `join phase preflight` for a
// worker whose outcome the image does not decide: a kubelet credential
// or the cluster CA left from an earlier join, the kubelet's port taken,
// the kernel's forwarding switched off, swap on.
func workerChecks(kubeletPort int) []preflightCheck {
	fileAvailable := func(path string) preflightCheck {
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
	fileContent := func(path, want string) preflightCheck {
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
	return []preflightCheck{
		fileAvailable(KubeletKubeconfig),
		fileAvailable(BootstrapKubeconfig),
		fileAvailable(KubernetesPKIDir + "/ca.crt"),
		{name: fmt.Sprintf("Port-%d", defaultKubeletPort), check: func(*Flow) error {
			l, err := net.Listen("tcp", fmt.Sprintf(":%d", kubeletPort))
			if err != nil {
				return fmt.Errorf("port %d is in use (is a kubelet running? `systemctl status kubelet`)", kubeletPort)
			}
			return l.Close()
		}},
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

// workerPreflight replaces kubeadm's `join phase preflight` on a worker.
// Run as a separate process, kubeadm's phase made a discovery round trip
// to the API and ran the kubelet binary for its version, 24.5 s on the
// worker's critical path under emulation; what it checks beyond these
// checks the image guarantees. A check the config's
// ignorePreflightErrors names is reported, not fatal, as with
// kubeadm.
func workerPreflight(_ context.Context, h *Flow, c *machineconfig.Config) error {
	return runChecks(h, c, workerChecks(defaultKubeletPort))
}

func runChecks(h *Flow, c *machineconfig.Config, checks []preflightCheck) error {
	var failed []string
	for _, chk := range checks {
		err := chk.check(h)
		if err == nil {
			continue
		}
		if ignored(c.Cluster.IgnorePreflightErrors, chk.name) {
			h.Report.Report(stepNodePreflight, "warning", fmt.Sprintf("[WARNING %s]: %v (named in cluster.ignorePreflightErrors)", chk.name, err))
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
