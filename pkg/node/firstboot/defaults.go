package firstboot

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/bootloader"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/configsource/cmdline"
	"github.com/terrarium-os/terrarium/pkg/node/configsource/embedded"
	"github.com/terrarium-os/terrarium/pkg/node/configsource/labeldisk"
)

// Defaults returns the production wiring.
func Defaults(log *slog.Logger) Options {
	return Options{
		Host:    RealHost(),
		Console: Consoles{SysActive: "/sys/class/tty/console/active"},
		Log:     log,
		// The order is documented in docs/config-acquisition.md.
		Sources: []configsource.Provider{
			embedded.Provider{Path: layout.EmbeddedConfig},
			cmdline.Provider{Path: "/proc/cmdline"},
			labeldisk.Provider{Dir: "/dev/disk/by-label"},
		},
		ChangeSources: []configsource.Provider{
			labeldisk.Provider{Dir: "/dev/disk/by-label"},
		},
		BootLoader:       &bootloader.ESPLoader{Device: "/dev/disk/by-partlabel/" + layout.LabelESP, Mount: "/run/terrarium/esp"},
		Reboot:           func(ctx context.Context) error { return RealHost().run(ctx, "systemctl", "reboot") },
		PollInterval:     2 * time.Second,
		WatchInterval:    3 * time.Second,
		AddressWait:      30 * time.Second,
		TrialRebootDelay: 10 * time.Second,
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
