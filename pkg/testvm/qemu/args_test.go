package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err, "withDefaults")
	return cfg.args()
}

func TestArgsDefaults(t *testing.T) {
	dir := t.TempDir()
	args := buildArgs(t, Config{Dir: dir})
	want := [][2]string{
		{"-machine", "q35"},
		{"-accel", "tcg"},
		{"-cpu", "qemu64,+rdrand,-cx16"},
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
		assert.True(t, hasPair(args, w[0], w[1]), "missing %s %s in %q", w[0], w[1], args)
	}
	for _, flag := range []string{"-nodefaults", "-no-user-config"} {
		assert.Contains(t, args, flag)
	}
	for _, a := range args {
		assert.NotContains(t, a, "kvm", "only TCG is available")
	}
	assert.NotContains(t, args, "-netdev", "NetNone must not create a netdev")
	assert.NotContains(t, args, "-icount", "the guest's clock follows the host's unless InstructionClock is set")
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
				assert.True(t, hasPair(args, w[0], w[1]), "missing %s %s in\n%q", w[0], w[1], args)
			}
			if tt.last != nil {
				assert.Equal(t, tt.last, args[len(args)-len(tt.last):], "the arguments' end")
			}
		})
	}
}

func TestArgsNoHotplugPorts(t *testing.T) {
	args := buildArgs(t, Config{Dir: t.TempDir(), HotplugPorts: -1})
	for _, a := range args {
		assert.False(t, strings.HasPrefix(a, "pcie-root-port"), "unexpected %s", a)
	}
}

func TestArgvNice(t *testing.T) {
	cfg, err := Config{Dir: t.TempDir()}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, DefaultBinary, cfg.argv()[0], "argv[0] without Nice")
	cfg.Nice = 10
	assert.Equal(t, "nice -n 10 "+DefaultBinary, strings.Join(cfg.argv()[:4], " "), "argv with Nice 10")
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
		{"BIOS with Secure Boot", Config{BIOS: true, SecureBoot: true}, "BIOS boots SeaBIOS"},
		{"BIOS with OVMF", Config{BIOS: true, OVMFCode: "/fw/code.fd"}, "BIOS boots SeaBIOS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Dir == "" && tt.name != "no dir" {
				tt.cfg.Dir = t.TempDir()
			}
			_, err := tt.cfg.withDefaults()
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestPrepareDirVars(t *testing.T) {
	template := filepath.Join(t.TempDir(), "VARS.fd")
	require.NoError(t, os.WriteFile(template, []byte("template"), 0o644))
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
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, VarsFile), tt.existing, 0o644))
			}
			sock := filepath.Join(dir, QMPSocket)
			cfg, err := Config{Dir: dir, OVMFVars: template}.withDefaults()
			require.NoError(t, err)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(sock, nil, 0o644)) // stale socket from an earlier run
			require.NoError(t, prepareDir(cfg), "prepareDir")
			got, err := os.ReadFile(filepath.Join(dir, VarsFile))
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got), "efivars.fd")
			assert.NoFileExists(t, sock, "the stale socket is removed")
		})
	}
}

func TestPrepareDirMissingTemplate(t *testing.T) {
	cfg, err := Config{Dir: t.TempDir(), OVMFVars: "/nonexistent/VARS.fd"}.withDefaults()
	require.NoError(t, err)
	require.ErrorContains(t, prepareDir(cfg), "seeding UEFI vars")
}

// TestArgsSecureBoot: a Secure Boot machine runs OVMF's Secure Boot build
// with SMM and a variable store only SMM writes; the default machine has
// neither.
func TestArgsSecureBoot(t *testing.T) {
	dir := t.TempDir()
	args := buildArgs(t, Config{Dir: dir, SecureBoot: true})
	for _, w := range [][2]string{
		{"-machine", "q35,smm=on"},
		{"-global", "driver=cfi.pflash01,property=secure,value=on"},
		{"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + SecureBootOVMFCode},
		{"-drive", "if=pflash,format=raw,unit=1,file=" + dir + "/efivars.fd"},
	} {
		assert.True(t, hasPair(args, w[0], w[1]), "missing %s %s in %q", w[0], w[1], args)
	}
	plain := buildArgs(t, Config{Dir: t.TempDir()})
	assert.NotContains(t, plain, "-global", "a machine without SecureBoot")
	assert.True(t, hasPair(plain, "-machine", "q35"), "a machine without SecureBoot: %q", plain)
	own := buildArgs(t, Config{Dir: t.TempDir(), SecureBoot: true, OVMFCode: "/fw/code.fd"})
	assert.True(t, hasPair(own, "-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/fw/code.fd"), "OVMFCode is kept under SecureBoot: %q", own)
}

// TestArgsBIOS: a BIOS machine has no flash, so QEMU boots its own
// SeaBIOS, and no UEFI variable store.
func TestArgsBIOS(t *testing.T) {
	cfg, err := Config{Dir: t.TempDir(), BIOS: true}.withDefaults()
	require.NoError(t, err)
	for _, a := range cfg.args() {
		assert.NotContains(t, a, "pflash")
	}
	require.NoError(t, prepareDir(cfg))
	assert.NoFileExists(t, filepath.Join(cfg.Dir, VarsFile))
}

// TestArgsTPM: a machine with a TPM gets a CRB TPM 2.0 backed by its
// swtpm's socket in Dir; the default machine has none.
func TestArgsTPM(t *testing.T) {
	dir := t.TempDir()
	args := buildArgs(t, Config{Dir: dir, TPM: true})
	for _, w := range [][2]string{
		{"-chardev", "socket,id=chrtpm,path=" + dir + "/tpm.sock"},
		{"-tpmdev", "emulator,id=tpm0,chardev=chrtpm"},
		{"-device", "tpm-crb,tpmdev=tpm0"},
	} {
		assert.True(t, hasPair(args, w[0], w[1]), "missing %s %s in %q", w[0], w[1], args)
	}
	assert.NotContains(t, buildArgs(t, Config{Dir: t.TempDir()}), "-tpmdev", "a machine without TPM")
}
