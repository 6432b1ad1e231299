package firstboot

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/boot/inplace"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotinstall"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotmount"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/configdrive"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/nocloud"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/ops/timesync"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/fwcfg"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/vmware"

	"github.com/terrarium-os/terrarium/pkg/node/boot/bootloader"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cmdline"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/embedded"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/labeldisk"
	"github.com/terrarium-os/terrarium/pkg/node/images/mirrors"
	"github.com/terrarium-os/terrarium/pkg/node/images/registryd"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/kube/volumebackup"
)

// NewInPlaceDisk is the production inplace.Disk: what
// terrarium-in-place@.service (`firstboot in-place SLOT`) switches with, and
// what firstboot decides with (esp: the ESP it reads; nil for a switch).
func NewInPlaceDisk(h *host.Host, esp slotinstall.ESP) *inplace.Disk {
	return &inplace.Disk{
		Path: h.Path, ESP: esp, ByPartLabel: "/dev/disk/by-partlabel", MountDir: layout.InPlaceSlotDir, Marker: layout.RunInPlaceSlot,
		Mount: slotmount.MountExecutable, Bind: inplace.BindMount, Registry: mirrors.Loopback,
	}
}

// Defaults returns the production wiring.
func Defaults(log *slog.Logger) Options {
	h := host.Real()
	md := &media.Block{Host: h, Dir: "/run/terrarium/media", Service: layout.StickSocket}
	cluster := kubeadmflow.Real(h)
	cluster.Backups = etcdbackup.FromStick(h, md)
	cluster.VolumeBackups = volumebackup.FromStick(h, md)
	esp := &bootloader.ESPLoader{Device: "/dev/disk/by-partlabel/" + layout.LabelESP, Mount: "/run/terrarium/esp"}
	var boot bootloader.BootLoader = esp
	devices := slotinstall.ByPartLabel("/dev/disk/by-partlabel")
	install, stage, arm := DiskInstaller(h, devices, esp), DiskStager(h, devices, esp), DiskArmer(esp)
	stageAlong := DiskStreamStager(h, devices, esp)
	var inPlace InPlacer = &inplace.Service{Disk: NewInPlaceDisk(h, esp),
		Start: func(ctx context.Context, unit string) error { return h.Run(ctx, "systemctl", "start", unit) }}
	var toDisk ISOInstaller
	if liveBoot("/proc/cmdline") {
		inPlace = nil
		boot, install, stage, toDisk = bootloader.Live{}, refuseLive, refuseLive, liveDiskInstaller(h)
		stageAlong = nil
		arm = func(context.Context, slotinstall.Result, host.Reporter) (slotinstall.Result, error) {
			return slotinstall.Result{}, errLiveUpgrade
		}
	}
	return Options{
		Host:    h,
		Cluster: cluster,
		Console: Consoles{SysActive: "/sys/class/tty/console/active"},
		Log:     log,
		// The order is documented in docs/config-acquisition.md.
		Sources:          enrollSources(),
		ChangeSources:    changeSources(),
		BootLoader:       boot,
		Install:          install,
		Stage:            stage,
		Arm:              arm,
		StageAlong:       stageAlong,
		InstallISO:       toDisk,
		Reboot:           func(ctx context.Context) error { return h.Run(ctx, "systemctl", "reboot") },
		PollInterval:     2 * time.Second,
		WatchInterval:    3 * time.Second,
		AddressWait:      30 * time.Second,
		TimeSync:         timesync.DefaultSync(),
		Media:            md,
		TrialRebootDelay: 10 * time.Second,
		Rollout:          defaultRollout(h),
		InPlace:          inPlace,
	}
}

// defaultRollout takes a cluster node's part in its cluster's upgrades
// with its kubelet's credentials (and, on a control plane, the admin's),
// fetching from the peers its registry configuration names.
func defaultRollout(h *host.Host) rollouts.Options {
	open := func(kubeconfig string) (*kubeclient.Client, error) {
		b, err := os.ReadFile(h.Path(kubeconfig))
		if err != nil {
			return nil, err
		}
		return kubeclient.New(b, func(p string) ([]byte, error) { return os.ReadFile(h.Path(p)) })
	}
	return rollouts.Options{
		API: func() (rollouts.API, error) {
			c, err := open(kubeadmflow.KubeletKubeconfig)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		Admin: func() (rollouts.AdminAPI, error) {
			c, err := open(kubeadmflow.AdminKubeconfig)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		Peers: func() (upgradeshare.Peers, error) {
			return registryd.PeerFetcher(h.Path(layout.RegistryConfigFile))
		},
		ShareDir: layout.UpgradesDir,
		Poll:     5 * time.Second,
		Drain:    rollout.DrainOptions{Timeout: 5 * time.Minute, Poll: 2 * time.Second},
		// Three trial boots under TCG, with a Kubernetes upgrade, take
		// up to two hours (make e2e-upgrade budgets 40 minutes a step).
		StaleTurn: 3 * time.Hour,
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
		// Best effort, console by console: one that takes nothing must
		// not keep the message from the others.
		_, _ = f.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n")))
		_ = f.Close()
	}
	return len(p), nil
}

var _ io.Writer = Consoles{}

// byLabel is where udev links volumes by their filesystem label.
const byLabel = "/dev/disk/by-label"

// enrollSources are the config sources a node not yet enrolled probes, in
// the documented order (docs/config-acquisition.md): the stored state
// comes before them all (the runner reads it first).
func enrollSources() []configsource.Provider {
	return append([]configsource.Provider{
		embedded.Provider{Path: layout.EmbeddedConfig},
		cmdline.Provider{Path: "/proc/cmdline"},
	}, changeSources()...)
}

// changeSources are the sources an enrolled node watches for signed
// changes: the media a person inserts and the platforms' channels, which
// an administrator can change while the node runs. (A config in the image
// or on the kernel command line is the same at every boot.)
func changeSources() []configsource.Provider {
	return []configsource.Provider{
		labeldisk.Provider{Dir: byLabel},
		nocloud.Provider{Dir: byLabel},
		configdrive.Provider{Dir: byLabel},
		vmware.Provider{DMIVendorFile: vmware.DefaultDMIVendorFile},
		fwcfg.Provider{},
	}
}
