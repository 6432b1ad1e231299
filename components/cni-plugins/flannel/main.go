// Command flannel is the CNI plugin for flannel's pod network, written for
// Terrarium because flannel's own plugin (github.com/flannel-io/cni-plugin)
// is not on the Go module proxy. It follows the same contract: flanneld
// writes the node's lease to /run/flannel/subnet.env, and this plugin turns
// it into a bridge network with host-local addresses from that lease,
// delegating the work to the bridge and host-local plugins.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// netConf is the plugin's configuration in a conflist.
type netConf struct {
	types.NetConf
	// SubnetFile is where flanneld writes the node's lease.
	SubnetFile string `json:"subnetFile"`
	// DataDir keeps each container's delegate configuration for DEL.
	DataDir string `json:"dataDir"`
	// Delegate is merged into the bridge configuration.
	Delegate map[string]any `json:"delegate"`
}

// lease is what flanneld wrote to subnet.env: the cluster's pod network
// and this node's subnet of it, both as network prefixes (flanneld writes
// the subnet as the node's gateway address, 10.244.1.1/24; host-local wants
// the network, 10.244.1.0/24).
type lease struct {
	network netip.Prefix
	subnet  netip.Prefix
	mtu     int
	ipMasq  bool
}

func loadConf(stdin []byte) (*netConf, error) {
	c := &netConf{SubnetFile: "/run/flannel/subnet.env", DataDir: "/var/lib/cni/flannel"}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, fmt.Errorf("parse flannel network configuration: %w", err)
	}
	return c, nil
}

func readLease(path string) (*lease, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read flannel lease (is flanneld running?): %w", err)
	}
	defer f.Close()
	l := &lease{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(s.Text()), "=")
		if !ok {
			continue
		}
		switch k {
		case "FLANNEL_NETWORK", "FLANNEL_SUBNET":
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %q: %w", path, k, v, err)
			}
			if k == "FLANNEL_NETWORK" {
				l.network = p.Masked()
			} else {
				l.subnet = p.Masked()
			}
		case "FLANNEL_MTU":
			if l.mtu, err = strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("%s: FLANNEL_MTU %q: %w", path, v, err)
			}
		case "FLANNEL_IPMASQ":
			l.ipMasq = v == "true"
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !l.network.IsValid() || !l.subnet.IsValid() {
		return nil, fmt.Errorf("%s lacks FLANNEL_NETWORK or FLANNEL_SUBNET", path)
	}
	return l, nil
}

// delegateConf is the bridge configuration for one lease.
func delegateConf(c *netConf, l *lease) ([]byte, error) {
	d := map[string]any{}
	for k, v := range c.Delegate {
		d[k] = v
	}
	d["name"] = c.Name
	d["cniVersion"] = c.CNIVersion
	set := func(k string, v any) {
		if _, ok := d[k]; !ok {
			d[k] = v
		}
	}
	set("type", "bridge")
	set("bridge", "cni0")
	set("isGateway", true)
	set("hairpinMode", true)
	set("ipMasq", !l.ipMasq)
	if l.mtu > 0 {
		set("mtu", l.mtu)
	}
	d["ipam"] = map[string]any{
		"type":   "host-local",
		"ranges": [][]map[string]string{{{"subnet": l.subnet.String()}}},
		"routes": []map[string]string{{"dst": l.network.String()}},
	}
	return json.Marshal(d)
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	l, err := readLease(c.SubnetFile)
	if err != nil {
		return err
	}
	conf, err := delegateConf(c, l)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", c.DataDir, err)
	}
	saved := filepath.Join(c.DataDir, args.ContainerID)
	if err := os.WriteFile(saved, conf, 0o600); err != nil {
		return fmt.Errorf("save delegate configuration: %w", err)
	}
	res, err := invoke.DelegateAdd(ctx(), "bridge", conf, nil)
	if err != nil {
		return fmt.Errorf("bridge plugin: %w", err)
	}
	return types.PrintResult(res, c.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	c, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	saved := filepath.Join(c.DataDir, args.ContainerID)
	conf, err := os.ReadFile(saved)
	if errors.Is(err, os.ErrNotExist) {
		return nil // never added, or already deleted
	}
	if err != nil {
		return fmt.Errorf("read delegate configuration: %w", err)
	}
	if err := invoke.DelegateDel(ctx(), "bridge", conf, nil); err != nil {
		return fmt.Errorf("bridge plugin: %w", err)
	}
	return os.Remove(saved)
}

func cmdCheck(args *skel.CmdArgs) error {
	c, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	conf, err := os.ReadFile(filepath.Join(c.DataDir, args.ContainerID))
	if err != nil {
		return fmt.Errorf("read delegate configuration: %w", err)
	}
	return invoke.DelegateCheck(ctx(), "bridge", conf, nil)
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck},
		version.All, "flannel CNI plugin (Terrarium)")
}
