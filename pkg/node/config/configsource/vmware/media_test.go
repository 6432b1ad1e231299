package vmware

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// fakeMedia maps a device path to the files on its volume.
type fakeMedia map[string]map[string]string

func (m fakeMedia) read(dev, name string, limit int64) ([]byte, error) {
	files, ok := m[dev]
	if !ok {
		return nil, fmt.Errorf("open %s: not a volume", dev)
	}
	data, ok := files[name]
	if !ok {
		return nil, fmt.Errorf("%s: %s: %w", dev, name, fs.ErrNotExist)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %s: %w", dev, name, ErrTooLarge)
	}
	return []byte(data), nil
}

// writeLabel makes a by-label link stand-in (a file) named as udev names
// it.
func writeLabel(t *testing.T, dir, name string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))
}

// offVMware is vmware-rpctool's answer off VMware.
var offVMware = &fakeRPC{err: &CommandError{Name: "vmware-rpctool", Code: 255, Stderr: "Error: must be run inside a virtual machine on a VMware hypervisor product.\n"}}

func TestFetchMedia(t *testing.T) {
	env := ovfEnv(PropHostname, "node-1")
	tests := []struct {
		name    string
		labels  []string
		files   map[string]map[string]string // label → files
		source  string
		wantErr error
		says    string
	}{
		{
			name:   "vSphere's label",
			labels: []string{"TERRA-CONFIG", `OVF\x20ENV`},
			files:  map[string]map[string]string{`OVF\x20ENV`: {OVFEnvFile: env}},
			source: `VMware OVF environment (DIR/OVF\x20ENV: ovf-env.xml, terrarium.hostname)`,
		},
		{
			name:   "other products' labels, any case",
			labels: []string{"ovfenv"},
			files:  map[string]map[string]string{"ovfenv": {OVFEnvFile: env}},
			source: "VMware OVF environment (DIR/ovfenv: ovf-env.xml, terrarium.hostname)",
		},
		{
			name:   "OVF-TRANSPORT, ISO9660 8.3 name",
			labels: []string{"OVF-TRANSPORT"},
			files:  map[string]map[string]string{"OVF-TRANSPORT": {"ovf_env.xml": env}},
			source: "VMware OVF environment (DIR/OVF-TRANSPORT: ovf_env.xml, terrarium.hostname)",
		},
		{
			name:    "no OVF label",
			labels:  []string{"TERRA-CONFIG", "cidata", `OVF\x20EN`},
			wantErr: configsource.ErrAbsent,
			says:    "no CD labelled OVF ENV (or OVFENV, OVF-TRANSPORT) under DIR",
		},
		{
			name:    "CD without ovf-env.xml",
			labels:  []string{`OVF\x20ENV`},
			files:   map[string]map[string]string{`OVF\x20ENV`: {"README": "x"}},
			wantErr: configsource.ErrAbsent,
			says:    `DIR/OVF\x20ENV has no ovf-env.xml`,
		},
		{
			name:    "no terrarium properties",
			labels:  []string{`OVF\x20ENV`},
			files:   map[string]map[string]string{`OVF\x20ENV`: {OVFEnvFile: ovfEnv("app.port", "80")}},
			wantErr: configsource.ErrAbsent,
			says:    "sets none of terrarium.config",
		},
		{
			name:    "unreadable CD",
			labels:  []string{`OVF\x20ENV`},
			wantErr: errors.New("not a volume"),
		},
		{
			name:    "bad XML",
			labels:  []string{`OVF\x20ENV`},
			files:   map[string]map[string]string{`OVF\x20ENV`: {OVFEnvFile: "<Environment>"}},
			wantErr: ErrBadOVFEnv,
			says:    `DIR/OVF\x20ENV: ovf-env.xml`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			media := fakeMedia{}
			for _, l := range tt.labels {
				writeLabel(t, dir, l)
			}
			for l, files := range tt.files {
				media[filepath.Join(dir, l)] = files
			}
			p := Provider{Runner: offVMware, MediaDir: dir, ReadMedia: media.read}
			found, err := p.Fetch(context.Background())
			says := replaceDir(tt.says, dir)
			switch {
			case tt.wantErr == nil:
				require.NoError(t, err)
				assert.Equal(t, replaceDir(tt.source, dir), found.Source)
				assert.Contains(t, string(found.Config), "hostname: node-1")
			case errors.Is(tt.wantErr, configsource.ErrAbsent), errors.Is(tt.wantErr, ErrBadOVFEnv):
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), says)
			default:
				require.Error(t, err)
				assert.NotErrorIs(t, err, configsource.ErrAbsent)
				assert.Contains(t, err.Error(), tt.wantErr.Error())
			}
		})
	}
}

func replaceDir(s, dir string) string { return strings.ReplaceAll(s, "DIR", dir) }

func TestFetchNoMediaDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "by-label")
	_, err := Provider{Runner: offVMware, MediaDir: dir}.Fetch(context.Background())
	require.ErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), dir)
}

func TestUnescapeLabel(t *testing.T) {
	for in, want := range map[string]string{
		`OVF\x20ENV`: "OVF ENV",
		`a\x2fb`:     "a/b",
		`OVFENV`:     "OVFENV",
		`bad\x2`:     `bad\x2`,
		`bad\xzz`:    `bad\xzz`,
		`\\x20`:      `\ `,
	} {
		assert.Equal(t, want, unescapeLabel(in), in)
	}
}

// TestFetchISO: an ISO9660 CD as the ISO transport attaches it (made by
// xorriso, which `make test` installs), read through ReadVolumeFile.
func TestFetchISO(t *testing.T) {
	xorriso, err := exec.LookPath("xorriso")
	require.NoError(t, err, "xorriso is installed by scripts/deps.sh (make test)")
	for _, tt := range []struct {
		name string
		args []string // after xorriso, before the source directory
		file string   // as the provider finds it
	}{
		{name: "Rock Ridge and Joliet", args: []string{"-as", "mkisofs", "-quiet", "-R", "-J", "-V", "OVF ENV", "-o"}, file: OVFEnvFile},
		// Only ISO9660's own names: the file is OVF_ENV.XML;1.
		{name: "plain ISO9660", args: []string{"-rockridge", "off", "-joliet", "off", "-volid", "OVF ENV", "-outdev"}, file: "ovf_env.xml"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(src, OVFEnvFile), []byte(ovfEnv(PropHostname, "node-1")), 0o644))
			dir := t.TempDir()
			iso := filepath.Join(dir, `OVF\x20ENV`)
			args := append(tt.args, iso)
			if tt.args[0] == "-as" {
				args = append(args, src)
			} else {
				args = append(args, "-map", src, "/")
			}
			out, err := exec.Command(xorriso, args...).CombinedOutput()
			require.NoError(t, err, "%s", out)

			found, err := Provider{Runner: offVMware, MediaDir: dir}.Fetch(context.Background())
			require.NoError(t, err)
			assert.Contains(t, string(found.Config), "hostname: node-1")
			assert.Contains(t, found.Source, iso+": "+tt.file)
		})
	}
}
