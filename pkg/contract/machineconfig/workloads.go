// The add-ons for workloads in a cluster config: local storage, resource
// metrics and LoadBalancer addresses (docs/workloads.md).

package machineconfig

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// LocalStorage is the local-path StorageClass's part of a cluster config.
type LocalStorage struct {
	// Disabled leaves the cluster without the local-path StorageClass
	// (`imagebuild config cluster --no-local-storage`). The init node
	// reads it when it forms the cluster; the same on every node.
	Disabled bool `yaml:"disabled,omitempty"`
	// Size caps this node's volume area on TERRA-STATE, a size like
	// 20GiB (at least MinLocalVolumesSize). The area is allocated whole
	// when the node first makes it and never leaves less than
	// Config.LocalVolumesKeep free: a node short of room makes it smaller
	// and says so. Absent: a quarter of TERRA-STATE.
	Size string `yaml:"size,omitempty"`
	// Disk makes a whole second disk this node's volume area instead of
	// a file on TERRA-STATE: selected as install.disk selects, never a
	// disk holding Terrarium, and formatted (ext4, label TERRA-VOLUMES)
	// on first use only when it is empty; a disk already formatted so is
	// used as it is, volumes and all.
	Disk *DiskSelector `yaml:"disk,omitempty"`
}

// LocalVolumesDisk is the disk this node's config makes its volume area;
// nil for a file on TERRA-STATE.
func (c *Cluster) LocalVolumesDisk() *DiskSelector {
	if c == nil || c.LocalStorage == nil || c.LocalStorage.Disabled {
		return nil
	}
	return c.LocalStorage.Disk
}

// The volume area's bounds.
const (
	// MinLocalVolumesSize is the smallest volume area a node makes.
	MinLocalVolumesSize int64 = 64 << 20
	// LocalVolumesHeadroom is what the volume area leaves free on
	// TERRA-STATE beyond the state reserve (state.reserveMiB, etcd's
	// floor): room for an upgrade file, side-loaded images and logs.
	LocalVolumesHeadroom int64 = 1 << 30
)

// LocalVolumesKeep is what a new volume area leaves free on TERRA-STATE:
// the state reserve and LocalVolumesHeadroom (2 GiB by default).
func (c *Config) LocalVolumesKeep() int64 {
	return int64(c.StateReserveBytes()) + LocalVolumesHeadroom
}

// Metrics is the resource metrics API's part of a cluster config.
type Metrics struct {
	// Disabled leaves the cluster without metrics-server (`imagebuild
	// config cluster --no-metrics`): no kubectl top, no autoscaling on
	// CPU or memory. The init node reads it when it forms the cluster;
	// the same on every node.
	Disabled bool `yaml:"disabled,omitempty"`
}

// MetricsEnabled says whether the cluster has the resource metrics API.
func (c *Cluster) MetricsEnabled() bool {
	return c.Metrics == nil || !c.Metrics.Disabled
}

// LocalStorageEnabled says whether the cluster has the local-path
// StorageClass.
func (c *Cluster) LocalStorageEnabled() bool {
	return c.LocalStorage == nil || !c.LocalStorage.Disabled
}

// LocalVolumesSize is the size this node's config asks for its volume
// area, 0 for the default.
func (c *Cluster) LocalVolumesSize() int64 {
	if c.LocalStorage == nil || c.LocalStorage.Size == "" {
		return 0
	}
	n, err := ParseSize(c.LocalStorage.Size)
	if err != nil {
		return 0
	}
	return n
}

func validateLocalStorage(ps *strictyaml.Problems, p strictyaml.Path, s LocalStorage) {
	if s.Disk != nil {
		validateDiskSelector(ps, p.Field("disk"), *s.Disk)
		switch {
		case s.Disabled:
			ps.Addf(p.Field("disk"), "the cluster's local storage is disabled: the disk would stay unused; remove disk or disabled")
		case s.Size != "":
			ps.Addf(p.Field("size"), "sizes a volume area on TERRA-STATE, and disk makes the whole disk the area; remove size or disk")
		}
		return
	}
	if s.Size == "" {
		return
	}
	n, err := ParseSize(s.Size)
	switch {
	case err != nil:
		ps.Addf(p.Field("size"), "%v", err)
	case n < MinLocalVolumesSize:
		ps.Addf(p.Field("size"), "%s is below the smallest volume area, 64MiB; give a size like 20GiB", quote(s.Size))
	case s.Disabled:
		ps.Addf(p.Field("size"), "the cluster's local storage is disabled: a volume area would stay unused; remove size or disabled")
	}
}

// LoadBalancer is the LoadBalancer addresses' part of a cluster config:
// MetalLB's address pool, announced in L2 mode (ARP) on the cluster's
// link (docs/workloads.md).
type LoadBalancer struct {
	// Addresses are the pool's ranges: FIRST-LAST (10.77.0.100-10.77.0.120)
	// or a CIDR (10.77.0.128/27), on the cluster's link and clear of every
	// node's address (`imagebuild config cluster --load-balancer`). The
	// same on every node; the init node applies them.
	Addresses []string `yaml:"addresses"`
}

// LoadBalancerEnabled says whether the cluster gives Services of type
// LoadBalancer addresses.
func (c *Cluster) LoadBalancerEnabled() bool {
	return c.LoadBalancer != nil && len(c.LoadBalancer.Addresses) > 0
}

// AddressRange is a range of addresses, both ends included.
type AddressRange struct{ First, Last netip.Addr }

// Contains says whether a is in the range.
func (r AddressRange) Contains(a netip.Addr) bool {
	return r.First.BitLen() == a.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Overlaps says whether the ranges share an address.
func (r AddressRange) Overlaps(o AddressRange) bool {
	return r.First.BitLen() == o.First.BitLen() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// ParseAddressRange reads FIRST-LAST or a CIDR.
func ParseAddressRange(s string) (AddressRange, error) {
	if first, last, ok := strings.Cut(s, "-"); ok {
		f, err := netip.ParseAddr(strings.TrimSpace(first))
		if err != nil {
			return AddressRange{}, fmt.Errorf("%s: the first address: %w", quote(s), err)
		}
		l, err := netip.ParseAddr(strings.TrimSpace(last))
		if err != nil {
			return AddressRange{}, fmt.Errorf("%s: the last address: %w", quote(s), err)
		}
		switch {
		case f.Zone() != "" || l.Zone() != "":
			return AddressRange{}, fmt.Errorf("%s: an address with a zone cannot be a LoadBalancer address", quote(s))
		case f.BitLen() != l.BitLen():
			return AddressRange{}, fmt.Errorf("%s: the two ends are of different families", quote(s))
		case l.Less(f):
			return AddressRange{}, fmt.Errorf("%s: the last address comes before the first", quote(s))
		}
		return AddressRange{f.Unmap(), l.Unmap()}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return AddressRange{}, fmt.Errorf("%s is neither a range like 10.77.0.100-10.77.0.120 nor a CIDR like 10.77.0.128/27", quote(s))
	}
	if p.Masked() != p {
		return AddressRange{}, fmt.Errorf("%s has host bits set; write %s", quote(s), p.Masked())
	}
	return AddressRange{p.Addr(), lastAddr(p)}, nil
}

// validateLoadBalancer checks the pool against the cluster and this
// node's static addresses: every range on the node's own link (an L2
// address is answered for on the link, so a range off it is unreachable),
// clear of the node's and the control planes' addresses and of the pod
// and Service ranges, no two ranges overlapping.
func validateLoadBalancer(ps *strictyaml.Problems, p strictyaml.Path, c Cluster, prefixes []netip.Prefix) {
	if len(c.LoadBalancer.Addresses) == 0 {
		ps.Addf(p.Field("addresses"), "lists no addresses; give a range on the cluster's link like 10.77.0.100-10.77.0.120, or remove loadBalancer")
		return
	}
	var link []netip.Prefix
	if node, err := netip.ParseAddr(c.NodeIP); err == nil {
		for _, np := range prefixes {
			if np.Addr() == node {
				link = append(link, np.Masked())
			}
		}
	}
	taken := map[netip.Addr]string{}
	for _, s := range c.ControlPlanes {
		if a, err := netip.ParseAddr(s); err == nil {
			taken[a] = "a control plane's address"
		}
	}
	if a, err := netip.ParseAddr(c.NodeIP); err == nil {
		taken[a] = "this node's address"
	}
	var others []netip.Prefix
	for _, s := range []string{c.PodCIDR, c.ServiceCIDR} {
		if pr, err := netip.ParsePrefix(s); err == nil {
			others = append(others, pr.Masked())
		}
	}
	var seen []AddressRange
	for i, s := range c.LoadBalancer.Addresses {
		at := p.Field("addresses").Index(i)
		r, err := ParseAddressRange(s)
		if err != nil {
			ps.Addf(at, "%v", err)
			continue
		}
		if len(link) > 0 && !slices.ContainsFunc(link, func(l netip.Prefix) bool { return l.Contains(r.First) && l.Contains(r.Last) }) {
			ps.Addf(at, "%s is not inside the cluster's link %s: MetalLB answers for an address on the link that holds nodeIP; pick free addresses of %s", s, link[0], link[0])
		}
		for _, l := range link {
			if l.Addr().Is4() && (r.Contains(l.Addr()) || r.Contains(lastAddr(l))) {
				ps.Addf(at, "%s holds the network or broadcast address of %s; start and end inside it", s, l)
				break
			}
		}
		for _, a := range sortedAddrs(taken) {
			if r.Contains(a) {
				ps.Addf(at, "%s holds %s (%s); leave the nodes' addresses out of the pool", s, a, taken[a])
			}
		}
		for _, o := range others {
			if r.Overlaps(AddressRange{o.Addr(), lastAddr(o)}) {
				ps.Addf(at, "%s overlaps the cluster's range %s", s, o)
			}
		}
		for j, prev := range seen {
			if r.Overlaps(prev) {
				ps.Addf(at, "%s overlaps addresses[%d] (%s)", s, j, c.LoadBalancer.Addresses[j])
			}
		}
		seen = append(seen, r)
	}
}

func sortedAddrs(m map[netip.Addr]string) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
