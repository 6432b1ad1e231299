// Package fwcfg finds the machine config in QEMU's firmware configuration
// device (fw_cfg), for VMs and CI without config disks:
//
//	qemu-system-x86_64 ... \
//	  -fw_cfg name=opt/dev.terrarium/config,file=machine.yaml \
//	  -fw_cfg name=opt/dev.terrarium/config.sig,file=machine.yaml.sig
//
// The guest kernel's qemu_fw_cfg module (CONFIG_FW_CFG_SYSFS) shows each
// entry under /sys/firmware/qemu_fw_cfg/by_name/<name>/ as raw (the bytes)
// and size (their count, in decimal). Debian builds it as a module, which
// udev loads on QEMU machines from the ACPI device QEMU0002 (x86) or the
// device tree's qemu,fw-cfg-mmio (Arm); without it the directory is
// missing and the provider reports absence.
package fwcfg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// Entry names, as given to QEMU's -fw_cfg name=. QEMU wants names under
// "opt/" led by a reverse domain name.
const (
	ConfigName    = "opt/dev.terrarium/config"
	SignatureName = "opt/dev.terrarium/config.sig"
	// CoreOSConfigName is where Fedora CoreOS and Flatcar read an
	// Ignition config: a CI job written for them passes its .ign file
	// unchanged. Read when ConfigName is absent.
	CoreOSConfigName = "opt/com.coreos/config"
)

// DefaultRoot is where the kernel shows fw_cfg.
const DefaultRoot = "/sys/firmware/qemu_fw_cfg"

// Caps on the entries read.
const (
	MaxConfigSize    = 1 << 20
	MaxSignatureSize = signature.MaxFileSize
)

// Provider reads the config from the fw_cfg sysfs tree at Root.
type Provider struct {
	// Root is the kernel's fw_cfg directory; empty means DefaultRoot.
	Root string
}

var _ configsource.Provider = Provider{}

// Name implements configsource.Provider.
func (Provider) Name() string { return "qemu-fw_cfg" }

// Fetch implements configsource.Provider.
func (p Provider) Fetch(ctx context.Context) (*configsource.Found, error) {
	root := p.root()
	if _, err := os.Stat(filepath.Join(root, "by_name")); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no %s/by_name (not a QEMU VM, or the qemu_fw_cfg module is not loaded): %w",
			root, configsource.ErrAbsent)
	}
	name := ConfigName
	config, err := readEntry(root, name, MaxConfigSize)
	if errors.Is(err, os.ErrNotExist) {
		name = CoreOSConfigName
		config, err = readEntry(root, name, MaxConfigSize)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no fw_cfg entry %s or %s under %s/by_name (QEMU runs without -fw_cfg name=%s,file=machine.yaml): %w",
			ConfigName, CoreOSConfigName, root, ConfigName, configsource.ErrAbsent)
	}
	if err != nil {
		return nil, err
	}
	sig, err := readEntry(root, SignatureName, MaxSignatureSize)
	if errors.Is(err, os.ErrNotExist) {
		sig = nil
	} else if err != nil {
		return nil, err
	}
	return &configsource.Found{Config: config, Signature: sig, Source: "QEMU fw_cfg (" + name + ")"}, nil
}

func (p Provider) root() string {
	if p.Root == "" {
		return DefaultRoot
	}
	return p.Root
}

// readEntry returns the bytes of the fw_cfg entry name, refusing more than
// limit. A missing entry gives an error wrapping os.ErrNotExist.
func readEntry(root, name string, limit int64) ([]byte, error) {
	dir := filepath.Join(root, "by_name", filepath.FromSlash(name))
	// The size file tells a too large entry before it is read (through
	// fw_cfg's port interface, a megabyte takes a while).
	if b, err := os.ReadFile(filepath.Join(dir, "size")); err == nil {
		n, err := ParseSize(b)
		if err != nil {
			return nil, fmt.Errorf("fw_cfg %s: %w", name, err)
		}
		if n > limit {
			return nil, fmt.Errorf("fw_cfg %s is %d bytes: %w (%d)", name, n, ErrTooLarge, limit)
		}
	}
	f, err := os.Open(filepath.Join(dir, "raw"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// sysfs says raw is 0 bytes long whatever it holds: read to the end.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("fw_cfg %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("fw_cfg %s is more than %d bytes: %w", name, limit, ErrTooLarge)
	}
	return b, nil
}

// ParseSize parses the content of an entry's size file: a decimal byte
// count and a newline.
func ParseSize(b []byte) (int64, error) {
	s := strings.TrimSuffix(string(b), "\n")
	if len(s) > 20 {
		return 0, fmt.Errorf("size of %d characters: %w", len(s), ErrBadSize)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: %w", s, ErrBadSize)
	}
	return n, nil
}
