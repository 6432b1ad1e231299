package localvolumes

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/installer"
	"github.com/terrarium-os/terrarium/pkg/node/boot/statecrypt"
)

// An encrypted disk area: a node whose TERRA-STATE is encrypted makes its
// disk area a LUKS2 volume too (label layout.LabelVolumesLUKS), whose key
// is a random one in a file on TERRA-STATE (layout.LocalVolumesKey): the
// disk, carried off alone or with the node's, gives nothing away, and no
// second key is sealed or recovered — TERRA-STATE's recovery key opens
// STATE, which holds this one. A unit firstboot writes
// (layout.LocalVolumesOpenUnit) opens it at every boot before the mount.

// stateEncrypted tells whether this boot's TERRA-STATE is encrypted (the
// initramfs's layout.RunStateEncryption).
func (a *Area) stateEncrypted() bool {
	b, err := os.ReadFile(a.Host.Path(layout.RunStateEncryption))
	f := strings.Fields(string(b))
	return err == nil && len(f) > 0 && f[0] == layout.StateEncryptionTPM
}

// luksArea is the header of the encrypted volume area disk d holds, or
// nil when it holds none.
func (a *Area) luksArea(d installer.Disk) (*statecrypt.Header, error) {
	f, err := os.Open(a.Host.Path(d.Dev()))
	if err != nil {
		return nil, fmt.Errorf("volume area: %w", err)
	}
	defer f.Close()
	h, err := statecrypt.ReadHeader(f)
	switch {
	case errors.Is(err, statecrypt.ErrNotLUKS2):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("volume area: %s: %w", d.Dev(), err)
	case h.Label != layout.LabelVolumesLUKS:
		return nil, nil
	}
	return h, nil
}

// keySize is the size of an encrypted area's key.
const keySize = 32

// ensureKey returns the key file, made if there is none: written before
// the volume is made, so that a power cut after the format finds the key
// it was made with.
func (a *Area) ensureKey() (string, error) {
	p := a.Host.Path(layout.LocalVolumesKey)
	b, err := os.ReadFile(p)
	switch {
	case err == nil && len(b) == keySize:
		return p, nil
	case err == nil:
		return "", fmt.Errorf("volume area: %s holds %d bytes, not a key of %d", layout.LocalVolumesKey, len(b), keySize)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("volume area: %w", err)
	}
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	if _, err := a.Host.WriteIfChanged(layout.LocalVolumesKey, key, 0o600); err != nil {
		return "", fmt.Errorf("volume area: %w", err)
	}
	return p, nil
}

// ensureCryptDisk makes disk d an encrypted area (made says whether this
// call formatted it) and returns the opened device's filesystem UUID,
// with its LUKS2 UUID. d is empty, or the encrypted area whose header is
// existing.
func (a *Area) ensureCryptDisk(ctx context.Context, d installer.Disk, existing *statecrypt.Header) (fsUUID, luksUUID string, made bool, err error) {
	key, err := a.ensureKey()
	if err != nil {
		if existing != nil {
			return "", "", false, fmt.Errorf("%w (the disk's encrypted volume area opens only with the key TERRA-STATE kept; a TERRA-STATE made again lost it: empty the disk with wipefs -a %s to make a new area)", err, d.Dev())
		}
		return "", "", false, err
	}
	if existing != nil {
		luksUUID = existing.UUID
	} else {
		if luksUUID, err = newUUID(); err != nil {
			return "", "", false, err
		}
		args := statecrypt.FormatArgs(layout.LabelVolumesLUKS, key, d.Dev(), "--batch-mode", "--uuid", luksUUID)
		if err := a.Host.Run(ctx, "cryptsetup", args...); err != nil {
			return "", "", false, fmt.Errorf("volume area: encrypt %s: %w", d.Dev(), err)
		}
		made = true
		a.say("volume area: encrypted %s (LUKS2, label %s, its key on TERRA-STATE, which is encrypted)", d, layout.LabelVolumesLUKS)
	}
	if _, err := os.Stat(a.Host.Path(layout.LocalVolumesMapperDev)); errors.Is(err, fs.ErrNotExist) {
		if err := a.Host.Run(ctx, "cryptsetup", "open", "--batch-mode", "--type", "luks2", "--key-file", key, d.Dev(), layout.LocalVolumesMapperName); err != nil {
			return "", "", false, fmt.Errorf("volume area: open %s with %s: %w", d.Dev(), layout.LocalVolumesKey, err)
		}
	}
	// Inside a volume of ours opened with our key is only what we made:
	// the area's filesystem, or — cut before it was made — what the
	// cipher makes of the disk's old bytes.
	inner := installer.Disk{Name: "mapper/" + layout.LocalVolumesMapperName}
	id, _, err := a.probe(inner)
	if err != nil {
		return "", "", false, err
	}
	if id.label == layout.LabelVolumesFS {
		return id.uuid, luksUUID, made, nil
	}
	fsUUID, err = a.mkfs(ctx, layout.LocalVolumesMapperDev)
	return fsUUID, luksUUID, true, err
}

// openUnit is the unit that opens the encrypted area on the disk whose
// LUKS2 UUID is luksUUID, before the mount: a device the mapper holds
// already (firstboot opened it) is left as it is.
func openUnit(luksUUID string) []byte {
	dev := "dev-disk-by\\x2duuid-" + strings.ReplaceAll(luksUUID, "-", "\\x2d") + ".device"
	return []byte(`# Written by firstboot: this node's volume area is an encrypted disk
# (cluster.localStorage.disk on a node whose TERRA-STATE is encrypted).
[Unit]
Description=Open the encrypted volume area
DefaultDependencies=no
BindsTo=` + dev + `
After=` + dev + `
Before=` + layout.LocalVolumesUnit + ` umount.target
Conflicts=umount.target
ConditionPathExists=!` + layout.LocalVolumesMapperDev + `

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/cryptsetup open --batch-mode --type luks2 --key-file ` + layout.LocalVolumesKey + ` /dev/disk/by-uuid/` + luksUUID + ` ` + layout.LocalVolumesMapperName + `
`)
}

// cryptDropIn is the mount unit's drop-in for an encrypted area.
func cryptDropIn() []byte {
	return []byte(`# Written by firstboot: this node's volume area is an encrypted disk
# (cluster.localStorage.disk), opened by ` + layout.LocalVolumesOpenUnit + `.
[Unit]
ConditionPathExists=
Requires=` + layout.LocalVolumesOpenUnit + `
After=` + layout.LocalVolumesOpenUnit + `

[Mount]
What=` + layout.LocalVolumesMapperDev + `
Options=nodev,nosuid
`)
}
