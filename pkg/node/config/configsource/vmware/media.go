package vmware

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
)

// OVFEnvFile is the OVF environment's file on the ISO transport's CD.
// Without Rock Ridge or Joliet names, ISO9660 stores it as OVF_ENV.XML,
// which is read too (names match without regard to case).
const OVFEnvFile = "ovf-env.xml"

// ovfEnvFiles are the names OVFEnvFile may have on the CD.
func ovfEnvFiles() []string { return []string{OVFEnvFile, "ovf_env.xml"} }

// DefaultMediaDir is udev's by-label directory, where the ISO transport's
// CD appears.
const DefaultMediaDir = "/dev/disk/by-label"

// MediaReader returns the file name, of at most limit bytes, from the
// volume on dev; a missing file gives an error wrapping fs.ErrNotExist.
type MediaReader func(dev, name string, limit int64) ([]byte, error)

// ReadVolumeFile is the MediaReader for real media: it reads the ISO9660
// (or FAT) volume through package volume, without mounting it.
func ReadVolumeFile(dev, name string, limit int64) ([]byte, error) {
	v, err := volume.Open(dev)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	b, err := v.ReadFile(name, limit)
	if errors.Is(err, volume.ErrNotFound) {
		return nil, fmt.Errorf("%w (%w)", err, fs.ErrNotExist)
	}
	if errors.Is(err, volume.ErrTooLarge) {
		return nil, fmt.Errorf("%w (%w)", err, ErrTooLarge)
	}
	return b, err
}

// isOVFLabel reports whether a volume label is an OVF environment CD's:
// vSphere writes "OVF ENV"; cloud-init also knows "OVFENV" and
// "OVF-TRANSPORT" from other products. Case does not matter.
func isOVFLabel(label string) bool {
	for _, l := range []string{"OVF ENV", "OVFENV", "OVF-TRANSPORT"} {
		if strings.EqualFold(label, l) {
			return true
		}
	}
	return false
}

// unescapeLabel undoes udev's escaping of a by-label link name, which
// writes a space (and any other byte outside its safe set) as \x20.
func unescapeLabel(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] == '\\' && i+4 <= len(name) && name[i+1] == 'x' {
			if c, err := strconv.ParseUint(name[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(name[i])
	}
	return b.String()
}

// fromMedia reads ovf-env.xml from the first volume under MediaDir whose
// label is an OVF environment CD's (vSphere's ISO transport). It returns
// the config, or nil and what it looked at, or an error.
func (p Provider) fromMedia() (*configsource.Found, string, error) {
	dir := p.mediaDir()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("look for an OVF environment CD: %w", err)
	}
	for _, e := range entries {
		if !isOVFLabel(unescapeLabel(e.Name())) {
			continue
		}
		dev := filepath.Join(dir, e.Name())
		for _, name := range ovfEnvFiles() {
			data, err := p.readMedia()(dev, name, MaxValueSize)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, "", fmt.Errorf("OVF environment CD: %w", err)
			}
			return fromOVFEnv(data, dev+": "+name)
		}
		return nil, fmt.Sprintf("%s has no %s", dev, OVFEnvFile), nil
	}
	return nil, fmt.Sprintf("no CD labelled OVF ENV (or OVFENV, OVF-TRANSPORT) under %s", dir), nil
}

func (p Provider) mediaDir() string {
	if p.MediaDir == "" {
		return DefaultMediaDir
	}
	return p.MediaDir
}

func (p Provider) readMedia() MediaReader {
	if p.ReadMedia == nil {
		return ReadVolumeFile
	}
	return p.ReadMedia
}
