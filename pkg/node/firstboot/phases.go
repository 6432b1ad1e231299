package firstboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// phase is one provisioning step. Apply is idempotent (it checks before it
// acts, so a rerun after a power cut is safe); Verify checks the result
// without changing anything.
type phase struct {
	Name   string
	Apply  func(ctx context.Context, h *Host, c *machineconfig.Config) error
	Verify func(ctx context.Context, h *Host, c *machineconfig.Config) error
}

func phases() []phase {
	return []phase{
		{Name: "hostname", Apply: applyHostname, Verify: verifyHostname},
		{Name: "network", Apply: applyNetwork, Verify: verifyNetwork},
		{Name: "admin-user", Apply: applyAdmin, Verify: verifyAdmin},
		{Name: "registry-mirrors", Apply: applyRegistry, Verify: verifyRegistry},
	}
}

// phasesFor are the phases of a config: the cluster's follow the node's.
func phasesFor(c *machineconfig.Config) []phase {
	if c.Cluster == nil {
		return phases()
	}
	return append(phases(), clusterPhases()...)
}

func hostsFile(name string) string {
	return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + name + "\n"
}

func applyHostname(ctx context.Context, h *Host, c *machineconfig.Config) error {
	if _, err := h.writeIfChanged("/etc/hostname", []byte(c.Hostname+"\n"), 0o644); err != nil {
		return err
	}
	if _, err := h.writeIfChanged("/etc/hosts", []byte(hostsFile(c.Hostname)), 0o644); err != nil {
		return err
	}
	return h.run(ctx, "hostname", c.Hostname)
}

func verifyHostname(ctx context.Context, h *Host, c *machineconfig.Config) error {
	b, err := os.ReadFile(h.Path("/etc/hostname"))
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(b)); got != c.Hostname {
		return fmt.Errorf("/etc/hostname is %q, config says %q", got, c.Hostname)
	}
	return nil
}

const networkDir = "/etc/systemd/network"

// networkFiles renders one systemd-networkd .network file per interface.
func networkFiles(c *machineconfig.Config) map[string]string {
	files := map[string]string{}
	for i, ifc := range c.Network.Interfaces {
		var b strings.Builder
		b.WriteString("# Written by Terrarium firstboot from the machine config.\n[Match]\n")
		if ifc.MACAddress != "" {
			fmt.Fprintf(&b, "MACAddress=%s\n", ifc.MACAddress)
		} else {
			fmt.Fprintf(&b, "Name=%s\n", ifc.Name)
		}
		b.WriteString("\n[Network]\n")
		if ifc.DHCP {
			b.WriteString("DHCP=ipv4\n")
		}
		for _, a := range ifc.Addresses {
			fmt.Fprintf(&b, "Address=%s\n", a)
		}
		if ifc.Gateway != "" {
			fmt.Fprintf(&b, "Gateway=%s\n", ifc.Gateway)
		}
		for _, d := range ifc.DNS {
			fmt.Fprintf(&b, "DNS=%s\n", d)
		}
		b.WriteString("LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
		if cl := c.Cluster; cl != nil && ifc.HasAddress(cl.NodeIP) {
			// The Service network on the cluster link. A process on the
			// node (not in a pod) that connects to a ClusterIP needs a
			// route to it before kube-proxy's rules can rewrite the
			// destination to a pod: without one (an air-gapped node has
			// no default route) the connect fails with "Network is
			// unreachable". This route is narrower than the default route
			// k3s's air-gap guide asks for, and leads nowhere else.
			fmt.Fprintf(&b, "\n[Route]\nDestination=%s\nPreferredSource=%s\n", cl.ServiceCIDR, cl.NodeIP)
		}
		if ifc.DHCP {
			// No NTP, no hostname from DHCP: the machine config is the
			// only source of truth.
			b.WriteString("\n[DHCPv4]\nUseHostname=no\nUseNTP=no\nUseDomains=no\n")
		}
		files[filepath.Join(networkDir, fmt.Sprintf("10-terrarium-%d.network", i))] = b.String()
	}
	return files
}

func applyNetwork(ctx context.Context, h *Host, c *machineconfig.Config) error {
	want := networkFiles(c)
	changed := false
	old, _ := filepath.Glob(h.Path(filepath.Join(networkDir, "10-terrarium-*.network")))
	for _, f := range old {
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(f, h.Root), "/")
		if _, ok := want[rel]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
			changed = true
		}
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w, err := h.writeIfChanged(n, []byte(want[n]), 0o644)
		if err != nil {
			return err
		}
		changed = changed || w
	}
	if !changed {
		return nil
	}
	return h.run(ctx, "networkctl", "reload")
}

func verifyNetwork(ctx context.Context, h *Host, c *machineconfig.Config) error {
	for n, content := range networkFiles(c) {
		b, err := os.ReadFile(h.Path(n))
		if err != nil {
			return err
		}
		if string(b) != content {
			return fmt.Errorf("%s differs from the machine config", n)
		}
	}
	return nil
}

func adminName(c *machineconfig.Config) string {
	if c.Admin == nil {
		return ""
	}
	return c.Admin.Name
}

// adminSudoers names the admin firstboot manages: its content is
// "<name> ALL=(ALL) NOPASSWD:ALL".
const adminSudoers = "/etc/sudoers.d/terrarium-admin"

// managedAdmin is the admin user firstboot created, "" when none.
func managedAdmin(h *Host) string {
	b, err := os.ReadFile(h.Path(adminSudoers))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// removeAdmin removes the admin firstboot created before, when the config
// no longer names it: its account, home and sudo rule.
func removeAdmin(ctx context.Context, h *Host, old string) error {
	if _, err := lookupUser(h, old); err == nil {
		// Its sessions end with its access (best effort: it may have none).
		_ = h.run(ctx, "loginctl", "terminate-user", old)
		// --force: even if a process of it is still running.
		if err := h.run(ctx, "userdel", "--force", "--remove", old); err != nil {
			return err
		}
	} else if !errors.Is(err, errNoUser) {
		return err
	}
	if err := os.Remove(h.Path(adminSudoers)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func applyAdmin(ctx context.Context, h *Host, c *machineconfig.Config) error {
	name := adminName(c)
	if old := managedAdmin(h); old != "" && old != name {
		if err := removeAdmin(ctx, h, old); err != nil {
			return fmt.Errorf("remove the former admin %s: %w", old, err)
		}
	}
	if name == "" {
		return nil
	}
	if _, err := lookupUser(h, name); errors.Is(err, errNoUser) {
		if err := h.run(ctx, "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo", "--comment", "Terrarium admin", name); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	// No password logins: the password stays locked, SSH keys only.
	if err := h.run(ctx, "usermod", "--lock", name); err != nil {
		return err
	}
	u, err := lookupUser(h, name)
	if err != nil {
		return err
	}
	keys := strings.Join(c.Admin.SSHAuthorizedKeys, "\n") + "\n"
	sshDir := filepath.Join(u.home, ".ssh")
	if _, err := h.writeIfChanged(filepath.Join(sshDir, "authorized_keys"), []byte(keys), 0o600); err != nil {
		return err
	}
	for _, p := range []string{sshDir, filepath.Join(sshDir, "authorized_keys")} {
		if err := os.Chown(h.Path(p), u.uid, u.gid); err != nil {
			return err
		}
	}
	if err := os.Chmod(h.Path(sshDir), 0o700); err != nil {
		return err
	}
	_, err = h.writeIfChanged(adminSudoers, []byte(name+" ALL=(ALL) NOPASSWD:ALL\n"), 0o440)
	return err
}

func verifyAdmin(ctx context.Context, h *Host, c *machineconfig.Config) error {
	name := adminName(c)
	if old := managedAdmin(h); old != name && old != "" {
		return fmt.Errorf("the former admin %s still has a sudo rule", old)
	}
	if name == "" {
		return nil
	}
	u, err := lookupUser(h, name)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(h.Path(filepath.Join(u.home, ".ssh", "authorized_keys")))
	if err != nil {
		return err
	}
	if string(b) != strings.Join(c.Admin.SSHAuthorizedKeys, "\n")+"\n" {
		return fmt.Errorf("authorized_keys of %s differs from the machine config", name)
	}
	return nil
}
