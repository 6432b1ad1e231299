// The add-ons for workloads in a cluster config: local storage and
// resource metrics (docs/workloads.md).

package machineconfig

import (
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
