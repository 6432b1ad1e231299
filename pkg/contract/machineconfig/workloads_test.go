package machineconfig_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

func TestLocalStorage(t *testing.T) {
	cfgs := clusterConfigs(t)
	for _, tt := range []struct {
		name, storage string
		enabled       bool
		size          int64
		disk          *machineconfig.DiskSelector
		problem       string
	}{
		{name: "absent", enabled: true},
		{name: "sized", storage: "  localStorage:\n    size: 20GiB\n", enabled: true, size: 20 << 30},
		{name: "disabled", storage: "  localStorage:\n    disabled: true\n"},
		{name: "not a size", storage: "  localStorage:\n    size: lots\n", problem: `$.cluster.localStorage.size: "lots" is not a size`},
		{name: "too small", storage: "  localStorage:\n    size: 1MiB\n", problem: "$.cluster.localStorage.size: \"1MiB\" is below the smallest volume area"},
		{name: "sized but disabled", storage: "  localStorage:\n    disabled: true\n    size: 1GiB\n", problem: "$.cluster.localStorage.size: the cluster's local storage is disabled"},
		{name: "a disk", storage: "  localStorage:\n    disk:\n      serial: DATA1\n      minSize: 100GiB\n", enabled: true, disk: &machineconfig.DiskSelector{Serial: "DATA1", MinSize: "100GiB"}},
		{name: "a disk and a size", storage: "  localStorage:\n    size: 20GiB\n    disk:\n      serial: DATA1\n", problem: "$.cluster.localStorage.size: sizes a volume area on TERRA-STATE, and disk makes the whole disk the area; remove size or disk"},
		{name: "a disk but disabled", storage: "  localStorage:\n    disabled: true\n    disk:\n      serial: DATA1\n", problem: "$.cluster.localStorage.disk: the cluster's local storage is disabled"},
		{name: "a disk by a path that is none", storage: "  localStorage:\n    disk:\n      path: /dev/sdb\n", problem: `$.cluster.localStorage.disk.path: "/dev/sdb" is not a /dev/disk/by-path/ link`},
		{name: "a disk no size fits", storage: "  localStorage:\n    disk:\n      minSize: 2TB\n      maxSize: 1TB\n", problem: "$.cluster.localStorage.disk.maxSize: 1TB is less than minSize 2TB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(cfgs["cp-1"], "  role: init\n", "  role: init\n"+tt.storage, 1)))
			if tt.problem != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.problem)
				assert.Contains(t, err.Error(), "cp-1.yaml", "the message names the file")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, c.Cluster.LocalStorageEnabled(), "local storage on")
			assert.Equal(t, tt.size, c.Cluster.LocalVolumesSize(), "volume area size")
			assert.Equal(t, tt.disk, c.Cluster.LocalVolumesDisk(), "volume disk")
		})
	}
}

func TestMetrics(t *testing.T) {
	cfgs := clusterConfigs(t)
	for _, tt := range []struct {
		name, metrics string
		enabled       bool
	}{
		{name: "absent", enabled: true},
		{name: "disabled", metrics: "  metrics:\n    disabled: true\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(cfgs["cp-1"], "  role: init\n", "  role: init\n"+tt.metrics, 1)))
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, c.Cluster.MetricsEnabled())
		})
	}
}

func TestLoadBalancer(t *testing.T) {
	cfgs := clusterConfigs(t)
	pool := func(addrs ...string) string {
		return "  loadBalancer:\n    addresses: [" + strings.Join(addrs, ", ") + "]\n"
	}
	for _, tt := range []struct {
		name, lb string
		enabled  bool
		problem  string
	}{
		{name: "absent"},
		{name: "a range", lb: pool("10.77.0.100-10.77.0.120"), enabled: true},
		{name: "a CIDR and a range", lb: pool("10.77.0.128/27", "10.77.0.100-10.77.0.101"), enabled: true},
		{name: "one address", lb: pool("10.77.0.100-10.77.0.100"), enabled: true},
		{name: "empty", lb: "  loadBalancer:\n    addresses: []\n", problem: "$.cluster.loadBalancer.addresses: lists no addresses"},
		{name: "not a range", lb: pool("plenty"), problem: `$.cluster.loadBalancer.addresses[0]: "plenty" is neither a range like 10.77.0.100-10.77.0.120 nor a CIDR`},
		{name: "backwards", lb: pool("10.77.0.120-10.77.0.100"), problem: "the last address comes before the first"},
		{name: "mixed families", lb: pool("10.77.0.100-fd00::1"), problem: "the two ends are of different families"},
		{name: "host bits", lb: pool("10.77.0.129/27"), problem: "has host bits set; write 10.77.0.128/27"},
		{name: "off the link", lb: pool("10.78.0.100-10.78.0.120"), problem: "is not inside the cluster's link 10.77.0.0/24"},
		{name: "across the link's end", lb: pool("10.77.0.250-10.77.1.5"), problem: "is not inside the cluster's link 10.77.0.0/24"},
		{name: "broadcast", lb: pool("10.77.0.224/27"), problem: "holds the network or broadcast address of 10.77.0.0/24"},
		{name: "a node's address", lb: pool("10.77.0.5-10.77.0.15"), problem: "holds 10.77.0.10 (this node's address)"},
		{name: "another control plane", lb: pool("10.77.0.11-10.77.0.11"), problem: "holds 10.77.0.11 (a control plane's address)"},
		{name: "overlapping ranges", lb: pool("10.77.0.100-10.77.0.120", "10.77.0.110/31"), problem: "$.cluster.loadBalancer.addresses[1]: 10.77.0.110/31 overlaps addresses[0] (10.77.0.100-10.77.0.120)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(cfgs["cp-1"], "  role: init\n", "  role: init\n"+tt.lb, 1)))
			if tt.problem != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.problem)
				assert.Contains(t, err.Error(), "cp-1.yaml", "the message names the file")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, c.Cluster.LoadBalancerEnabled())
		})
	}
}

func TestAddressRange(t *testing.T) {
	r, err := machineconfig.ParseAddressRange("10.77.0.128/27")
	require.NoError(t, err)
	assert.Equal(t, "10.77.0.128", r.First.String())
	assert.Equal(t, "10.77.0.159", r.Last.String())
	r6, err := machineconfig.ParseAddressRange("fd00:77::100-fd00:77::1ff")
	require.NoError(t, err)
	assert.True(t, r6.Contains(netip.MustParseAddr("fd00:77::1aa")))
	assert.False(t, r6.Contains(netip.MustParseAddr("10.77.0.130")), "another family is never inside")
	assert.False(t, r.Overlaps(r6))
	assert.True(t, r.Overlaps(machineconfig.AddressRange{First: netip.MustParseAddr("10.77.0.159"), Last: netip.MustParseAddr("10.77.0.200")}))
}

func FuzzParseAddressRange(f *testing.F) {
	for _, s := range []string{"10.77.0.100-10.77.0.120", "10.77.0.128/27", "fd00::1-fd00::ff", "-", "1.2.3.4-", "::ffff:1.2.3.4-1.2.3.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := machineconfig.ParseAddressRange(s)
		if err != nil {
			return
		}
		if r.Last.Less(r.First) || r.First.BitLen() != r.Last.BitLen() {
			t.Fatalf("%q: range %v-%v", s, r.First, r.Last)
		}
		if !r.Contains(r.First) || !r.Contains(r.Last) || !r.Overlaps(r) {
			t.Fatalf("%q: a range holds its ends", s)
		}
	})
}
