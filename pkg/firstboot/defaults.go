package firstboot

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/terrarium-os/terrarium/pkg/configdisk"
	"github.com/terrarium-os/terrarium/pkg/layout"
)

// Defaults returns the production wiring.
func Defaults(log *slog.Logger) Options {
	return Options{
		Host:             RealHost(),
		Console:          Consoles{SysActive: "/sys/class/tty/console/active"},
		Log:              log,
		ConfigSource:     ConfigFromLabel("/dev/disk/by-label"),
		BootLoader:       &ESPLoader{Device: "/dev/disk/by-partlabel/" + layout.LabelESP, Mount: "/run/terrarium/esp"},
		Reboot:           func(ctx context.Context) error { return RealHost().run(ctx, "systemctl", "reboot") },
		PollInterval:     2 * time.Second,
		AddressWait:      30 * time.Second,
		TrialRebootDelay: 10 * time.Second,
		Now:              time.Now,
	}
}

// ConfigFromLabel reads machine.yaml from the disk whose filesystem label
// is TERRA-CONFIG (or TERRA-CONFI, the same name as FAT stores it), as
// udev links it under dir. Hot-plugged disks appear there too.
func ConfigFromLabel(dir string) func(ctx context.Context) ([]byte, string, bool, error) {
	return func(ctx context.Context) ([]byte, string, bool, error) {
		for _, label := range []string{layout.LabelConfig, layout.LabelConfigFAT} {
			dev := dir + "/" + label
			if _, err := os.Stat(dev); err != nil {
				continue
			}
			data, err := configdisk.Read(dev)
			if errors.Is(err, configdisk.ErrNoConfig) {
				return nil, dev, true, err
			}
			return data, dev, err == nil, err
		}
		return nil, "", false, nil
	}
}

// Consoles writes to every active system console (the serial port and the
// screen), so a person sees firstboot's messages wherever they look.
type Consoles struct {
	SysActive string
}

func (c Consoles) Write(p []byte) (int, error) {
	active, err := os.ReadFile(c.SysActive)
	names := strings.Fields(string(active))
	if err != nil || len(names) == 0 {
		names = []string{"console"}
	}
	for _, n := range names {
		f, err := os.OpenFile("/dev/"+n, os.O_WRONLY|syscall.O_NOCTTY, 0)
		if err != nil {
			continue
		}
		f.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n")))
		f.Close()
	}
	return len(p), nil
}

var _ io.Writer = Consoles{}
