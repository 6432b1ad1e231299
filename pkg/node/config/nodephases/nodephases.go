// Package nodephases brings the machine itself to what its config says:
// hostname, network (systemd-networkd) and the admin user with its SSH keys
// and sudo rule. Each phase touches only its own files and restarts nothing
// when they are already as desired.
package nodephases

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
)

// Phases are the node's own phases, in order: what the machine config
// says of the machine itself, before any registry or cluster.
func Phases(h *host.Host) []phase.Phase {
	return []phase.Phase{
		{Name: "hostname", Apply: phase.On(h, applyHostname), Verify: phase.On(h, verifyHostname)},
		{Name: "network", Apply: phase.On(h, applyNetwork), Verify: phase.On(h, verifyNetwork)},
		{Name: "admin-user", Apply: phase.On(h, applyAdmin), Verify: phase.On(h, verifyAdmin)},
	}
}

func hostsFile(name string) string {
	return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + name + "\n"
}

func applyHostname(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
	if _, err := h.WriteIfChanged("/etc/hostname", []byte(c.Hostname+"\n"), 0o644); err != nil {
		return err
	}
	if _, err := h.WriteIfChanged("/etc/hosts", []byte(hostsFile(c.Hostname)), 0o644); err != nil {
		return err
	}
	return h.Run(ctx, "hostname", c.Hostname)
}

func verifyHostname(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
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

func applyNetwork(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
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
		w, err := h.WriteIfChanged(n, []byte(want[n]), 0o644)
		if err != nil {
			return err
		}
		changed = changed || w
	}
	if !changed {
		return nil
	}
	return h.Run(ctx, "networkctl", "reload")
}

func verifyNetwork(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
	return h.FilesMatch(networkFiles(c))
}

// AdminName is the admin user a config names, "" when none.
func AdminName(c *machineconfig.Config) string {
	if c.Admin == nil {
		return ""
	}
	return c.Admin.Name
}

// AdminSudoers names the admin firstboot manages: its content is
// "<name> ALL=(ALL) NOPASSWD:ALL".
const AdminSudoers = "/etc/sudoers.d/terrarium-admin"

// ManagedAdmin is the admin user firstboot created, "" when none.
func ManagedAdmin(h *host.Host) string {
	b, err := os.ReadFile(h.Path(AdminSudoers))
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
func removeAdmin(ctx context.Context, h *host.Host, old string) error {
	if _, err := h.LookupUser(old); err == nil {
		// Its sessions end with its access (best effort: it may have none).
		_ = h.Run(ctx, "loginctl", "terminate-user", old)
		// --force: even if a process of it is still running.
		if err := h.Run(ctx, "userdel", "--force", "--remove", old); err != nil {
			return err
		}
	} else if !errors.Is(err, host.ErrNoUser) {
		return err
	}
	if err := os.Remove(h.Path(AdminSudoers)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func applyAdmin(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
	name := AdminName(c)
	if old := ManagedAdmin(h); old != "" && old != name {
		if err := removeAdmin(ctx, h, old); err != nil {
			return fmt.Errorf("remove the former admin %s: %w", old, err)
		}
	}
	if name == "" {
		return nil
	}
	if err := lockedAccount(ctx, h, name); err != nil {
		return err
	}
	u, err := h.LookupUser(name)
	if err != nil {
		return err
	}
	keys := strings.Join(c.Admin.SSHAuthorizedKeys, "\n") + "\n"
	sshDir := filepath.Join(u.Home, ".ssh")
	if _, err := h.WriteIfChanged(filepath.Join(sshDir, "authorized_keys"), []byte(keys), 0o600); err != nil {
		return err
	}
	for _, p := range []string{sshDir, filepath.Join(sshDir, "authorized_keys")} {
		if err := os.Chown(h.Path(p), u.UID, u.GID); err != nil {
			return err
		}
	}
	if err := os.Chmod(h.Path(sshDir), 0o700); err != nil {
		return err
	}
	_, err = h.WriteIfChanged(AdminSudoers, []byte(name+" ALL=(ALL) NOPASSWD:ALL\n"), 0o440)
	return err
}

// lockedAccount makes the admin's account with its password locked (no
// password logins, SSH keys only): a new one is made locked ("!"), one
// that exists is locked with usermod. One program fewer on a first boot:
// each costs a starved worker seconds.
func lockedAccount(ctx context.Context, h *host.Host, name string) error {
	switch _, err := h.LookupUser(name); {
	case errors.Is(err, host.ErrNoUser):
		return h.Run(ctx, "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo", "--comment", "Terrarium admin", "--password", "!", name)
	case err != nil:
		return err
	}
	return h.Run(ctx, "usermod", "--lock", name)
}

func verifyAdmin(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
	name := AdminName(c)
	if old := ManagedAdmin(h); old != name && old != "" {
		return fmt.Errorf("the former admin %s still has a sudo rule", old)
	}
	if name == "" {
		return nil
	}
	u, err := h.LookupUser(name)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(h.Path(filepath.Join(u.Home, ".ssh", "authorized_keys")))
	if err != nil {
		return err
	}
	if string(b) != strings.Join(c.Admin.SSHAuthorizedKeys, "\n")+"\n" {
		return fmt.Errorf("authorized_keys of %s differs from the machine config", name)
	}
	return nil
}
