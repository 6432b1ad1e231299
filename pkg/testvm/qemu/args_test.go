package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hasPair reports whether args contains flag immediately followed by value.
func hasPair(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}

func buildArgs(t *testing.T, cfg Config) []string {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatalf("withDefaults: %v", err)
	}
	return cfg.args()
}

func TestArgsDefaults(t *testing.T) {
	dir := t.TempDir()
	args := buildArgs(t, Config{Dir: dir})
	want := [][2]string{
		{"-machine", "q35"},
		{"-accel", "tcg"},
		{"-cpu", "qemu64,+rdrand"},
		{"-m", "2048"},
		{"-smp", "2"},
		{"-display", "none"},
		{"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd"},
		{"-drive", "if=pflash,format=raw,unit=1,file=" + dir + "/efivars.fd"},
		{"-device", "qemu-xhci,id=xhci"},
		{"-device", "pcie-root-port,id=hp0,chassis=1"},
		{"-device", "pcie-root-port,id=hp1,chassis=2"},
		{"-serial", "stdio"},
		{"-qmp", "unix:" + dir + "/qmp.sock,server=on,wait=off"},
		{"-nic", "none"},
	}
	for _, w := range want {
		if !hasPair(args, w[0], w[1]) {
			t.Errorf("missing %s %s in %q", w[0], w[1], args)
		}
	}
	for _, flag := range []string{"-nodefaults", "-no-user-config"} {
		if !slices.Contains(args, flag) {
			t.Errorf("missing %s", flag)
		}
	}
	for _, a := range args {
		if strings.Contains(a, "kvm") {
			t.Errorf("argument %q mentions kvm; only TCG is available", a)
		}
	}
	if slices.Contains(args, "-netdev") {
		t.Error("NetNone must not create a netdev")
	}
	if slices.Contains(args, "-icount") {
		t.Error("the guest's clock follows the host's unless InstructionClock is set")
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want [][2]string
		last []string // expected tail of the argument list
	}{
		{
			name: "sizes, CPU model and hotplug ports",
			cfg:  Config{MemoryMiB: 512, CPUs: 1, CPUModel: "max", HotplugPorts: 3},
			want: [][2]string{{"-m", "512"}, {"-smp", "1"}, {"-cpu", "max"}, {"-device", "pcie-root-port,id=hp2,chassis=3"}},
		},
		{
			name: "instruction clock",
			cfg:  Config{InstructionClock: true},
			want: [][2]string{{"-icount", "shift=0,sleep=on"}, {"-accel", "tcg"}},
		},
		{
			name: "virtio disk read-only with default id",
			cfg:  Config{Disks: []Disk{{Path: "/img/a.raw", Format: "raw", ReadOnly: true}}},
			want: [][2]string{
				{"-blockdev", `{"driver":"file","filename":"/img/a.raw","node-name":"disk0-file","read-only":true}`},
				{"-blockdev", `{"driver":"raw","file":"disk0-file","node-name":"disk0-fmt","read-only":true}`},
				{"-device", "virtio-blk-pci,id=disk0,drive=disk0-fmt"},
			},
		},
		{
			name: "usb and nvme disks in order",
			cfg: Config{Disks: []Disk{
				{ID: "boot", Path: "/img/b.qcow2", Format: "qcow2", Bus: BusUSB, Serial: "USB1"},
				{Path: "/img/n,1.raw", Format: "raw", Bus: BusNVMe, Serial: "NV1"},
			}},
			want: [][2]string{
				{"-blockdev", `{"driver":"qcow2","file":"boot-file","node-name":"boot-fmt","read-only":false}`},
				{"-device", "usb-storage,bus=xhci.0,id=boot,drive=boot-fmt,serial=USB1"},
				{"-blockdev", `{"driver":"file","filename":"/img/n,1.raw","node-name":"disk1-file","read-only":false}`},
				{"-device", "nvme,id=disk1,drive=disk1-fmt,serial=NV1"},
			},
		},
		{
			name: "two CD-ROMs, one AHCI port each",
			cfg: Config{Disks: []Disk{
				{ID: "cd", Path: "/img/a.iso", Format: "raw", ReadOnly: true, Bus: BusCDROM},
				{ID: "ovf", Path: "/img/b.iso", Format: "raw", ReadOnly: true, Bus: BusCDROM},
			}},
			want: [][2]string{
				{"-device", "ide-cd,bus=ide.0,id=cd,drive=cd-fmt"},
				{"-device", "ide-cd,bus=ide.1,id=ovf,drive=ovf-fmt"},
			},
		},
		{
			name: "a USB stick first in the boot order",
			cfg: Config{Disks: []Disk{
				{ID: "iso", Path: "/img/t.iso", Format: "raw", ReadOnly: true, Bus: BusUSB, BootIndex: 1},
			}},
			want: [][2]string{
				{"-device", "usb-storage,bus=xhci.0,id=iso,drive=iso-fmt,bootindex=1"},
			},
		},
		{
			name: "restricted network with capture",
			cfg:  Config{Network: Network{Mode: NetRestricted, MAC: "52:54:00:aa:bb:cc", Capture: "/c,ap.pcap"}},
			want: [][2]string{
				{"-netdev", "user,id=net0,restrict=on"},
				{"-device", "virtio-net-pci,netdev=net0,id=nic0,romfile=,mac=52:54:00:aa:bb:cc"},
				{"-object", "filter-dump,id=dump0,netdev=net0,file=/c,,ap.pcap"},
			},
		},
		{
			name: "fw_cfg file and string, escaped",
			cfg: Config{FwCfg: []FwCfg{
				{Name: "opt/terrarium/config", File: "/tmp/a,b.json"},
				{Name: "opt/terrarium/mode", String: "x,y"},
			}},
			want: [][2]string{
				{"-fw_cfg", "name=opt/terrarium/config,file=/tmp/a,,b.json"},
				{"-fw_cfg", "name=opt/terrarium/mode,string=x,,y"},
			},
		},
		{
			name: "custom firmware and extra args last",
			cfg:  Config{OVMFCode: "/fw/CODE.fd", ExtraArgs: []string{"-cpu", "max"}},
			want: [][2]string{{"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/fw/CODE.fd"}},
			last: []string{"-cpu", "max"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Dir = t.TempDir()
			args := buildArgs(t, tt.cfg)
			for _, w := range tt.want {
				if !hasPair(args, w[0], w[1]) {
					t.Errorf("missing %s %s in\n%q", w[0], w[1], args)
				}
			}
			if tt.last != nil && !slices.Equal(args[len(args)-len(tt.last):], tt.last) {
				t.Errorf("args end %q, want %q", args[len(args)-len(tt.last):], tt.last)
			}
		})
	}
}

func TestArgsNoHotplugPorts(t *testing.T) {
	args := buildArgs(t, Config{Dir: t.TempDir(), HotplugPorts: -1})
	for _, a := range args {
		if strings.HasPrefix(a, "pcie-root-port") {
			t.Errorf("unexpected %s", a)
		}
	}
}

func TestArgvNice(t *testing.T) {
	cfg, err := Config{Dir: t.TempDir()}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.argv()[0]; got != DefaultBinary {
		t.Errorf("argv[0] = %q without Nice, want %q", got, DefaultBinary)
	}
	cfg.Nice = 10
	if got := strings.Join(cfg.argv()[:4], " "); got != "nice -n 10 "+DefaultBinary {
		t.Errorf("argv starts %q with Nice 10", got)
	}
}

func TestConfigInvalid(t *testing.T) {
	disk := func(mod func(*Disk)) []Disk {
		d := Disk{Path: "/x.img", Format: "raw"}
		mod(&d)
		return []Disk{d}
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no dir", Config{}, "Dir is required"},
		{"socket path too long", Config{Dir: "/" + strings.Repeat("d", 110)}, "too long"},
		{"no path", Config{Disks: disk(func(d *Disk) { d.Path = "" })}, "Path is required"},
		{"probed format", Config{Disks: disk(func(d *Disk) { d.Format = "" })}, "want raw or qcow2"},
		{"vmdk", Config{Disks: disk(func(d *Disk) { d.Format = "vmdk" })}, "want raw or qcow2"},
		{"nvme without serial", Config{Disks: disk(func(d *Disk) { d.Bus = BusNVMe })}, "need a Serial"},
		{"unknown bus", Config{Disks: disk(func(d *Disk) { d.Bus = Bus(9) })}, "unknown bus"},
		{"writable CD-ROM", Config{Disks: disk(func(d *Disk) { d.Bus = BusCDROM })}, "read-only raw image"},
		{"bad id", Config{Disks: disk(func(d *Disk) { d.ID = "0disk" })}, "id \"0disk\""},
		{"id with comma", Config{Disks: disk(func(d *Disk) { d.ID = "a,b" })}, "id \"a,b\""},
		{"duplicate id", Config{Disks: []Disk{
			{ID: "a", Path: "/1", Format: "raw"}, {ID: "a", Path: "/2", Format: "raw"},
		}}, "duplicate id"},
		{"mac without network", Config{Network: Network{MAC: "52:54:00:00:00:01"}}, "need Mode NetRestricted"},
		{"capture without network", Config{Network: Network{Capture: "/x.pcap"}}, "need Mode NetRestricted"},
		{"bad mac", Config{Network: Network{Mode: NetRestricted, MAC: "52-54"}}, "MAC"},
		{"bad net mode", Config{Network: Network{Mode: NetMode(7)}}, "unknown mode"},
		{"fw_cfg without value", Config{FwCfg: []FwCfg{{Name: "opt/x"}}}, "exactly one of File and String"},
		{"fw_cfg with both", Config{FwCfg: []FwCfg{{Name: "opt/x", File: "/f", String: "s"}}}, "exactly one"},
		{"negative memory", Config{MemoryMiB: -1}, "negative"},
		{"nice above 19", Config{Nice: 20}, "Nice 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Dir == "" && tt.name != "no dir" {
				tt.cfg.Dir = t.TempDir()
			}
			_, err := tt.cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestPrepareDirVars(t *testing.T) {
	template := filepath.Join(t.TempDir(), "VARS.fd")
	if err := os.WriteFile(template, []byte("template"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		existing []byte // efivars.fd before Start; nil = absent
		want     string
	}{
		{name: "fresh dir gets the template", want: "template"},
		{name: "existing vars are kept", existing: []byte("written by OVMF"), want: "written by OVMF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "machine")
			if tt.existing != nil {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, VarsFile), tt.existing, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sock := filepath.Join(dir, QMPSocket)
			cfg, err := Config{Dir: dir, OVMFVars: template}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(sock, nil, 0o644); err != nil { // stale socket from an earlier run
				t.Fatal(err)
			}
			if err := prepareDir(cfg); err != nil {
				t.Fatalf("prepareDir: %v", err)
			}
			got, err := os.ReadFile(filepath.Join(dir, VarsFile))
			if err != nil || !bytes.Equal(got, []byte(tt.want)) {
				t.Errorf("efivars.fd = %q, %v; want %q", got, err, tt.want)
			}
			if _, err := os.Stat(sock); !os.IsNotExist(err) {
				t.Errorf("stale %s not removed: %v", QMPSocket, err)
			}
		})
	}
}

func TestPrepareDirMissingTemplate(t *testing.T) {
	cfg, err := Config{Dir: t.TempDir(), OVMFVars: "/nonexistent/VARS.fd"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(cfg); err == nil || !strings.Contains(err.Error(), "seeding UEFI vars") {
		t.Fatalf("err = %v", err)
	}
}
