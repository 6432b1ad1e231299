package fwcfg

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

const config = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-1\n"

// entry is one fw_cfg entry of a fake sysfs tree.
type entry struct {
	raw []byte
	// size is the size file's content; "" writes len(raw), "-" none.
	size string
}

// fakeSysfs writes a fw_cfg tree as the kernel shows it (by_name/<name>/
// raw and size) under a new directory, and returns its root.
func fakeSysfs(t *testing.T, entries map[string]entry) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "by_name"), 0o755))
	for name, e := range entries {
		dir := filepath.Join(root, "by_name", filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "raw"), e.raw, 0o400))
		size := e.size
		if size == "" {
			size = strconv.Itoa(len(e.raw)) + "\n"
		}
		if size != "-" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "size"), []byte(size), 0o444))
		}
	}
	return root
}

func TestFetch(t *testing.T) {
	big := bytes.Repeat([]byte("#"), MaxConfigSize+1)
	tests := []struct {
		name    string
		entries map[string]entry
		want    *configsource.Found
		wantErr error
		says    string
	}{
		{
			name:    "an Ignition config where CoreOS reads it",
			entries: map[string]entry{CoreOSConfigName: {raw: []byte(`{"ignition":{"version":"3.4.0"}}`)}},
			want:    &configsource.Found{Config: []byte(`{"ignition":{"version":"3.4.0"}}`), Source: "QEMU fw_cfg (opt/com.coreos/config)"},
		},
		{
			name:    "ours first",
			entries: map[string]entry{ConfigName: {raw: []byte(config)}, CoreOSConfigName: {raw: []byte(`{}`)}},
			want:    &configsource.Found{Config: []byte(config), Source: "QEMU fw_cfg (opt/dev.terrarium/config)"},
		},
		{
			name:    "config",
			entries: map[string]entry{ConfigName: {raw: []byte(config)}},
			want:    &configsource.Found{Config: []byte(config), Source: "QEMU fw_cfg (opt/dev.terrarium/config)"},
		},
		{
			name: "config and signature",
			entries: map[string]entry{
				ConfigName:    {raw: []byte(config)},
				SignatureName: {raw: []byte("sig")},
			},
			want: &configsource.Found{Config: []byte(config), Signature: []byte("sig"), Source: "QEMU fw_cfg (opt/dev.terrarium/config)"},
		},
		{
			name:    "no size file",
			entries: map[string]entry{ConfigName: {raw: []byte(config), size: "-"}},
			want:    &configsource.Found{Config: []byte(config), Source: "QEMU fw_cfg (opt/dev.terrarium/config)"},
		},
		{
			name:    "other entries only",
			entries: map[string]entry{"opt/org.example/thing": {raw: []byte("x")}},
			wantErr: configsource.ErrAbsent,
			says:    "-fw_cfg name=opt/dev.terrarium/config,file=machine.yaml",
		},
		{
			name:    "signature without config",
			entries: map[string]entry{SignatureName: {raw: []byte("sig")}},
			wantErr: configsource.ErrAbsent,
		},
		{
			name:    "config too large by its size",
			entries: map[string]entry{ConfigName: {raw: []byte(config), size: strconv.Itoa(MaxConfigSize+1) + "\n"}},
			wantErr: ErrTooLarge,
			says:    "1048577 bytes",
		},
		{
			name:    "config too large by its bytes",
			entries: map[string]entry{ConfigName: {raw: big, size: "-"}},
			wantErr: ErrTooLarge,
		},
		{
			name:    "config just small enough",
			entries: map[string]entry{ConfigName: {raw: big[:MaxConfigSize]}},
			want:    &configsource.Found{Config: big[:MaxConfigSize], Source: "QEMU fw_cfg (opt/dev.terrarium/config)"},
		},
		{
			name: "signature too large",
			entries: map[string]entry{
				ConfigName:    {raw: []byte(config)},
				SignatureName: {raw: bytes.Repeat([]byte("s"), MaxSignatureSize+1)},
			},
			wantErr: ErrTooLarge,
			says:    SignatureName,
		},
		{
			name:    "bad size file",
			entries: map[string]entry{ConfigName: {raw: []byte(config), size: "lots\n"}},
			wantErr: ErrBadSize,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeSysfs(t, tt.entries)
			got, err := Provider{Root: root}.Fetch(context.Background())
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.says)
				assert.Nil(t, got)
				if !errors.Is(tt.wantErr, configsource.ErrAbsent) {
					assert.NotErrorIs(t, err, configsource.ErrAbsent, "something unreadable is not absence")
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestFetchNoFwCfg(t *testing.T) {
	root := filepath.Join(t.TempDir(), "qemu_fw_cfg")
	_, err := Provider{Root: root}.Fetch(context.Background())
	require.ErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), root, "says where it looked")
	assert.Contains(t, err.Error(), "qemu_fw_cfg module")
}

func TestDefaults(t *testing.T) {
	assert.Equal(t, "qemu-fw_cfg", Provider{}.Name())
	assert.Equal(t, DefaultRoot, Provider{}.root())
	assert.Equal(t, "/sys/firmware/qemu_fw_cfg", DefaultRoot)
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "0\n", want: 0},
		{in: "1048576\n", want: 1 << 20},
		{in: "17", want: 17},
		{in: "", wantErr: true},
		{in: "-1\n", wantErr: true},
		{in: "1 \n", wantErr: true},
		{in: "0x10\n", wantErr: true},
		{in: "99999999999999999999999\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := ParseSize([]byte(tt.in))
			if tt.wantErr {
				require.ErrorIs(t, err, ErrBadSize)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseSize(f *testing.F) {
	f.Add([]byte("73\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseSize(b)
		if err != nil {
			if !errors.Is(err, ErrBadSize) {
				t.Fatalf("error %v is not ErrBadSize", err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("negative size %d", n)
		}
	})
}
