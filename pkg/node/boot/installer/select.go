package installer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// Errors of Select, each wrapped with the disks and the fix.
var (
	// ErrBootMedium: the selector picks the medium this node booted from.
	ErrBootMedium = errors.New("the install target is the boot medium")
	// ErrNoTarget: no disk is left after the selector and the rules.
	ErrNoTarget = errors.New("no disk to install to")
)

// Rules are what Select keeps off limits besides the selector.
type Rules struct {
	// Medium is the whole disk the node booted from (kernel name).
	Medium string
	// InUse are other disks in use (kernel name -> what for), such as the
	// one holding a live boot's TERRA-STATE.
	InUse map[string]string
	// MinSize is the smallest disk Terrarium installs onto.
	MinSize int64
	// Field is the config field the selector came from, for the
	// messages; "" is install.disk.
	Field string
	// AnySector takes disks of any sector size (a data disk holds a
	// filesystem made on it, not Terrarium's image).
	AnySector bool
}

// Select picks the install target among disks: the first, by kernel
// name, that matches sel and is at least the rules' MinSize. The boot
// medium and disks in use are never picked, nor optical drives, nor disks
// whose sectors are not 512 bytes; removable disks only when sel names
// them by path, id or serial.
func Select(disks []Disk, sel machineconfig.DiskSelector, rules Rules) (Disk, error) {
	medium, minSize := rules.Medium, rules.MinSize
	field := rules.Field
	if field == "" {
		field = "install.disk"
	}
	lo, hi, err := sel.Sizes()
	if err != nil {
		return Disk{}, fmt.Errorf("%s: %w", field, err)
	}
	named := sel.Path != "" || sel.ID != "" || sel.Serial != ""
	var why []string
	for _, d := range disks {
		reason := ""
		switch {
		case sel.Path != "" && !slices.Contains(d.Links, sel.Path):
			reason = "not " + sel.Path
		case sel.ID != "" && !slices.Contains(d.Links, sel.ID):
			reason = "not " + sel.ID
		case sel.Serial != "" && d.Serial != sel.Serial:
			reason = "serial " + orNone(d.Serial)
		case lo > 0 && d.Size < lo:
			reason = "smaller than minSize " + sel.MinSize
		case hi > 0 && d.Size > hi:
			reason = "larger than maxSize " + sel.MaxSize
		case d.Name == medium && named:
			return Disk{}, fmt.Errorf("%w: %s (%s) selects %s, the medium this node booted from; Terrarium never installs over its installer: select another disk", ErrBootMedium, field, sel, d)
		case d.Name == medium:
			reason = "the boot medium"
		case rules.InUse[d.Name] != "":
			reason = rules.InUse[d.Name]
		case d.Optical:
			reason = "an optical drive"
		case d.SectorSize != 0 && d.SectorSize != sector && !rules.AnySector:
			reason = fmt.Sprintf("%d-byte sectors (Terrarium's image has 512-byte ones)", d.SectorSize)
		case d.Removable && !named:
			reason = "removable (select it by path, id or serial to use it)"
		case d.Size < minSize:
			reason = fmt.Sprintf("smaller than the %s Terrarium needs", humanSize(minSize))
		}
		if reason == "" {
			return d, nil
		}
		why = append(why, fmt.Sprintf("%s: %s", d, reason))
	}
	if len(why) == 0 {
		why = append(why, "the machine has no disks")
	}
	return Disk{}, fmt.Errorf("%w: %s selects %s, and none fits:\n  %s", ErrNoTarget, field, sel, strings.Join(why, "\n  "))
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
