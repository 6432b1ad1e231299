package localvolumes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/boot/installer"
)

// diskField names the selector in messages.
const diskField = "cluster.localStorage.disk"

// ErrDiskHoldsData says the selected disk holds something other than a
// volume area: it is never formatted.
var ErrDiskHoldsData = errors.New("the disk holds data")

// ensureDisk makes the disk sel selects the node's volume area: an empty
// disk is formatted (ext4, label TERRA-VOLUMES, a UUID of its own; inside
// a LUKS2 volume when TERRA-STATE is encrypted, crypt.go), a disk already
// formatted so is taken as it is, anything else is refused. The mount
// unit is turned to the filesystem by a drop-in, then started. Each step
// checks before it acts: cut by a power loss, a rerun finds what was made
// and goes on.
func (a *Area) ensureDisk(ctx context.Context, sel machineconfig.DiskSelector) (Result, error) {
	d, err := a.selectDisk(sel)
	if err != nil {
		return Result{}, err
	}
	id, what, err := a.probe(d)
	if err != nil {
		return Result{}, err
	}
	luks, err := a.luksArea(d)
	if err != nil {
		return Result{}, err
	}
	made, encrypted := false, false
	var dropin, unit []byte
	switch {
	case luks != nil || (what == "" && id.label != layout.LabelVolumesFS && a.stateEncrypted()):
		_, luksUUID, m, err := a.ensureCryptDisk(ctx, d, luks)
		if err != nil {
			return Result{}, err
		}
		made, encrypted, dropin, unit = m, true, cryptDropIn(), openUnit(luksUUID)
	case id.label == layout.LabelVolumesFS:
		dropin = dropIn(id.uuid)
	case what != "":
		if id.ext4 {
			what = fmt.Sprintf("an ext4 filesystem labelled %q", id.label)
		}
		return Result{}, fmt.Errorf("volume area: %s selects %s, which holds %s: %w; Terrarium formats only an empty disk for volumes. Select another disk, or empty this one (wipefs -a %s) if what it holds may go",
			diskField, d, what, ErrDiskHoldsData, d.Dev())
	default:
		uuid, err := a.mkfs(ctx, d.Dev())
		if err != nil {
			return Result{}, err
		}
		made, dropin = true, dropIn(uuid)
	}
	changed := false
	if unit != nil {
		c, err := a.Host.WriteIfChanged("/etc/systemd/system/"+layout.LocalVolumesOpenUnit, unit, 0o644)
		if err != nil {
			return Result{}, fmt.Errorf("volume area: %w", err)
		}
		changed = c
	}
	c, err := a.Host.WriteIfChanged(layout.LocalVolumesDiskDropIn, dropin, 0o644)
	if err != nil {
		return Result{}, fmt.Errorf("volume area: %w", err)
	}
	if changed || c {
		if err := a.Host.Run(ctx, "systemctl", "daemon-reload"); err != nil {
			return Result{}, fmt.Errorf("volume area: %w", err)
		}
	}
	if err := a.start(ctx); err != nil {
		return Result{}, err
	}
	return Result{Size: d.Size, Made: made, Disk: d.String(), Encrypted: encrypted}, nil
}

// mkfs makes the area's ext4 filesystem on dev and returns its UUID.
func (a *Area) mkfs(ctx context.Context, dev string) (string, error) {
	uuid, err := newUUID()
	if err != nil {
		return "", err
	}
	// No reserved blocks (nothing of root's lives there), no lazy
	// initialization left running in the background.
	if err := a.Host.Run(ctx, "mkfs.ext4", "-q", "-F", "-L", layout.LabelVolumesFS, "-U", uuid, "-m", "0",
		"-E", "lazy_itable_init=0,lazy_journal_init=0", dev); err != nil {
		return "", fmt.Errorf("volume area: make the filesystem on %s: %w", dev, err)
	}
	a.say("volume area: made an ext4 filesystem (label %s, UUID %s) on %s", layout.LabelVolumesFS, uuid, dev)
	return uuid, nil
}

// dropIn is the mount unit's drop-in for the filesystem uuid: systemd
// waits for the disk's device (its default timeout) before it mounts.
func dropIn(uuid string) []byte {
	return []byte(`# Written by firstboot: this node's volume area is a whole disk
# (cluster.localStorage.disk), its ext4 filesystem found by UUID.
[Unit]
ConditionPathExists=

[Mount]
What=/dev/disk/by-uuid/` + uuid + `
Options=nodev,nosuid
`)
}

// selectDisk is the disk sel selects among the machine's, never one that
// holds Terrarium.
func (a *Area) selectDisk(sel machineconfig.DiskSelector) (installer.Disk, error) {
	list := a.Disks
	if list == nil {
		list = func() ([]installer.Disk, map[string]bool, error) {
			disks, err := installer.List(a.Host.Path("/sys/class/block"), a.Host.Path("/dev/disk"), a.Host.Path("/run/udev/data"))
			if err != nil {
				return nil, nil, err
			}
			own, err := installer.Installed(a.Host.Path("/sys/class/block"))
			return disks, own, err
		}
	}
	disks, own, err := list()
	if err != nil {
		return installer.Disk{}, fmt.Errorf("volume area: list the disks: %w", err)
	}
	rules := installer.Rules{Field: diskField, AnySector: true, MinSize: machineconfig.MinLocalVolumesSize, InUse: map[string]string{}}
	for name := range own {
		rules.InUse[name] = "holds Terrarium (its slots and TERRA-STATE)"
	}
	d, err := installer.Select(disks, sel, rules)
	if err != nil {
		return installer.Disk{}, fmt.Errorf("volume area: %w", err)
	}
	return d, nil
}

// ext4ID is what an ext4 superblock says of its filesystem.
type ext4ID struct {
	ext4        bool
	uuid, label string
}

// probe reads what disk d holds: the ext4 superblock at its start, if
// there is one, and what its first MiB holds ("" when it is all zeros).
func (a *Area) probe(d installer.Disk) (ext4ID, string, error) {
	f, err := os.Open(a.Host.Path(d.Dev()))
	if err != nil {
		return ext4ID{}, "", fmt.Errorf("volume area: %w", err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return ext4ID{}, "", fmt.Errorf("volume area: read %s: %w", d.Dev(), err)
	}
	what, err := installer.Holds(f)
	if err != nil {
		return ext4ID{}, "", fmt.Errorf("volume area: %w", err)
	}
	return parseExt4Superblock(sb), what, nil
}

// parseExt4Superblock reads an ext2/3/4 superblock (1024 bytes): the magic
// 0xEF53 at 0x38, the UUID at 0x68, the volume name at 0x78.
func parseExt4Superblock(sb []byte) ext4ID {
	if len(sb) < 0x88 || binary.LittleEndian.Uint16(sb[0x38:]) != 0xef53 {
		return ext4ID{}
	}
	u := sb[0x68:0x78]
	label, _, _ := bytes.Cut(sb[0x78:0x88], []byte{0})
	return ext4ID{
		ext4:  true,
		uuid:  fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]),
		label: strings.ToValidUTF8(string(label), "?"),
	}
}

// newUUID is a random (version 4) UUID, lower case as /dev/disk/by-uuid
// names it.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// onDisk says whether the node's area is a disk (the drop-in exists).
func (a *Area) onDisk() bool {
	_, err := os.Stat(a.Host.Path(layout.LocalVolumesDiskDropIn))
	return !errors.Is(err, fs.ErrNotExist)
}
