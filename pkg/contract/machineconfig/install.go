package machineconfig

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// Install asks a node booted live from the hybrid ISO to install Terrarium
// onto a disk and reboot into it (docs/operations/usb-nuc.md). A node
// running from a disk ignores it.
type Install struct {
	// Disk selects the target disk. Every field given must match; when
	// several disks match, the first by kernel name is taken. The boot
	// medium and optical drives are never targets, removable disks only
	// when named by path, id or serial.
	Disk DiskSelector `yaml:"disk,omitempty"`
	// Wipe allows a target that holds data (a partition table or a
	// filesystem in its first MiB). Without it, the installer takes only
	// an empty disk and says what it found on the others.
	Wipe bool `yaml:"wipe,omitempty"`
}

// DiskSelector picks a disk by what a person can read off the machine.
type DiskSelector struct {
	// Path is a /dev/disk/by-path/ link: the controller port, the same
	// for whatever disk sits in it.
	Path string `yaml:"path,omitempty"`
	// ID is a /dev/disk/by-id/ link: the disk's model and serial.
	ID string `yaml:"id,omitempty"`
	// Serial is the serial number the disk reports (lsblk -o SERIAL).
	Serial string `yaml:"serial,omitempty"`
	// MinSize and MaxSize bound the disk's size: a number with a unit,
	// like 100GiB or 2TB (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB).
	MinSize string `yaml:"minSize,omitempty"`
	MaxSize string `yaml:"maxSize,omitempty"`
}

// Disk path prefixes a selector's Path and ID carry.
const (
	DiskByPath = "/dev/disk/by-path/"
	DiskByID   = "/dev/disk/by-id/"
)

// Sizes returns the selector's bounds in bytes (0: no bound).
func (s DiskSelector) Sizes() (minSize, maxSize int64, err error) {
	if s.MinSize != "" {
		if minSize, err = ParseSize(s.MinSize); err != nil {
			return 0, 0, err
		}
	}
	if s.MaxSize != "" {
		if maxSize, err = ParseSize(s.MaxSize); err != nil {
			return 0, 0, err
		}
	}
	return minSize, maxSize, nil
}

// String describes the selector as a person would read it.
func (s DiskSelector) String() string {
	var parts []string
	for _, f := range []struct{ name, v string }{
		{"path", s.Path}, {"id", s.ID}, {"serial", s.Serial}, {"minSize", s.MinSize}, {"maxSize", s.MaxSize},
	} {
		if f.v != "" {
			parts = append(parts, f.name+" "+f.v)
		}
	}
	if len(parts) == 0 {
		return "any disk"
	}
	return strings.Join(parts, ", ")
}

var sizeUnits = []struct {
	suffix string
	factor int64
}{
	// Longest suffixes first: "GiB" before "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize reads a size like "100GiB", "1.5TB" or "512MiB".
func ParseSize(s string) (int64, error) {
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || v <= 0 || v*float64(u.factor) > 1<<62 {
			break
		}
		return int64(v * float64(u.factor)), nil
	}
	return 0, fmt.Errorf("%q is not a size: write a number and a unit, like 100GiB or 2TB", s)
}

func validateInstall(ps *strictyaml.Problems, path strictyaml.Path, in Install) {
	validateDiskSelector(ps, path.Field("disk"), in.Disk)
}

// validateDiskSelector checks a disk selector at d (install.disk,
// cluster.localStorage.disk).
func validateDiskSelector(ps *strictyaml.Problems, d strictyaml.Path, sel DiskSelector) {
	if sel.Path != "" && (!strings.HasPrefix(sel.Path, DiskByPath) || len(sel.Path) == len(DiskByPath)) {
		ps.Addf(d.Field("path"), "%q is not a %s link (ls -l %s on the machine lists them)", sel.Path, DiskByPath, DiskByPath)
	}
	if sel.ID != "" && (!strings.HasPrefix(sel.ID, DiskByID) || len(sel.ID) == len(DiskByID)) {
		ps.Addf(d.Field("id"), "%q is not a %s link (ls -l %s on the machine lists them)", sel.ID, DiskByID, DiskByID)
	}
	if sel.Serial != strings.TrimSpace(sel.Serial) {
		ps.Addf(d.Field("serial"), "%q has leading or trailing blanks; write the serial number alone", sel.Serial)
	}
	var minSize, maxSize int64
	var err error
	if sel.MinSize != "" {
		if minSize, err = ParseSize(sel.MinSize); err != nil {
			ps.Addf(d.Field("minSize"), "%v", err)
		}
	}
	if sel.MaxSize != "" {
		if maxSize, err = ParseSize(sel.MaxSize); err != nil {
			ps.Addf(d.Field("maxSize"), "%v", err)
		}
	}
	if minSize > 0 && maxSize > 0 && minSize > maxSize {
		ps.Addf(d.Field("maxSize"), "%s is less than minSize %s: no disk can match", sel.MaxSize, sel.MinSize)
	}
}
