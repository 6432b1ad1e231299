package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/transpile"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/labeldisk"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// The configs of docs/migrating-from-flatcar-and-fcos.md.
const (
	migration = "testdata/migration"
	configs   = "../../pkg/contract/transpile/testdata"
)

// runConfig runs `imagebuild config ARGS...` and returns what it printed.
func runConfig(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := configCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// A Flatcar user's CLC and a Fedora CoreOS or Flatcar user's Butane config
// go onto a config disk with their machine config: `config validate` and
// `config disk --ignition`, as the migration guide shows them. The disk
// carries the machine config with the Ignition part as JSON (golden: the
// guide's "on the disk"), which parses to the same plan as the file.
func TestConfigDiskIgnition(t *testing.T) {
	machine := filepath.Join(migration, "machine.yaml")
	for _, tc := range []struct{ file, golden string }{
		{"flatcar.clc.yaml", "node-1.clc.disk.yaml"},
		{"flatcar.bu", "node-1.bu.disk.yaml"},
		{"fcos.bu", ""},
		{"fcos.ign", ""},
	} {
		t.Run(tc.file, func(t *testing.T) {
			src := filepath.Join(configs, tc.file)
			_, err := runConfig(t, "validate", "--ignition", src, machine)
			require.NoError(t, err)

			img := filepath.Join(t.TempDir(), "node-1.img")
			_, err = runConfig(t, "disk", "-o", img, "--ignition", src, machine)
			require.NoError(t, err)
			files, err := labeldisk.ReadDisk(img)
			require.NoError(t, err)
			cfg, err := machineconfig.Parse("disk", files.Config)
			require.NoError(t, err)
			assert.Equal(t, "node-1", cfg.Hostname)

			data, err := os.ReadFile(src)
			require.NoError(t, err)
			want, err := transpile.Translate(tc.file, data, transpile.WithFilesDir(configs))
			require.NoError(t, err)
			got, err := ignitionspec.Parse([]byte(cfg.Ignition))
			require.NoError(t, err)
			assert.Equal(t, want.Config, got)

			if tc.golden == "" {
				return
			}
			golden := filepath.Join(migration, tc.golden)
			if *update {
				require.NoError(t, os.WriteFile(golden, files.Config, 0o644))
			}
			wantDisk, err := os.ReadFile(golden)
			require.NoError(t, err, "go test -update writes it")
			assert.Equal(t, string(wantDisk), string(files.Config))
		})
	}
}

// What the node could not apply is refused before a disk is written, at
// its line and column in the user's file; so is a second Ignition part,
// and a machine config's own ignition: that the node would refuse.
func TestConfigDiskIgnitionRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	machine := filepath.Join(migration, "machine.yaml")
	disks := write("disks.clc.yaml", "storage:\n  disks:\n    - device: /dev/sdb\n      wipe_table: true\n")
	typo := write("typo.bu", "variant: fcos\nversion: 1.6.0\nsystemd:\n  units:\n    - name: app.service\n      enabeld: true\n")
	admin := write("admin.bu", "variant: fcos\nversion: 1.6.0\npasswd:\n  users:\n    - name: admin\n")
	withAdmin := write("admin.yaml", "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-1\n"+
		"admin:\n  sshAuthorizedKeys: [\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop\"]\n")
	inline := write("inline.yaml", "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-1\n"+
		"ignition: |\n  {\"ignition\": {\"version\": \"3.4.0\"},\n   \"storage\": {\"disks\": [{\"device\": \"/dev/sdb\"}]}}\n")
	for _, tc := range []struct {
		name    string
		args    []string
		kind    error
		message string
	}{
		{"storage.disks in a CLC", []string{"--ignition", disks, machine}, ignitionspec.ErrUnsupported,
			disks + ":2:3: $.storage.disks: Terrarium does not partition disks; use the build spec"},
		{"a typo in Butane", []string{"--ignition", typo, machine}, transpile.ErrInvalid,
			typo + ":6:7: $.systemd.units[0].enabeld: warning: unused key enabeld; it is not in this Butane spec: fix its spelling, or remove it"},
		{"the machine config's admin", []string{"--ignition", admin, withAdmin}, ignitionspec.ErrConflict,
			admin + ":5:7: $.passwd.users[0].name: admin is the machine config's admin"},
		{"a second Ignition part", []string{"--ignition", disks, inline}, nil,
			inline + ": $.ignition: already set, and " + disks + " would be a second Ignition config"},
		{"the machine config's own ignition", []string{inline}, ignitionspec.ErrUnsupported,
			inline + ":6:16: $.storage.disks: Terrarium does not partition disks; use the build spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, sub := range []string{"validate", "disk"} {
				img := filepath.Join(dir, "node.img")
				args := append([]string{sub}, tc.args...)
				if sub == "disk" {
					args = append([]string{sub, "-o", img}, tc.args...)
				}
				_, err := runConfig(t, args...)
				require.Error(t, err, sub)
				if tc.kind != nil {
					assert.ErrorIs(t, err, tc.kind, sub)
				}
				assert.Contains(t, err.Error(), tc.message, sub)
				assert.NoFileExists(t, img, sub)
			}
		})
	}
}

// `config disk --help` says which Ignition files it takes.
func TestConfigDiskHelpNamesTheFormats(t *testing.T) {
	out, err := runConfig(t, "disk", "--help")
	require.NoError(t, err)
	for _, s := range []string{"--ignition", "Butane config", "variant: fcos", "flatcar", "Container Linux Config", "storage.disks"} {
		assert.Contains(t, strings.ReplaceAll(out, "\n", " "), s)
	}
}

// The migration guide shows the files the tests translate and the errors
// the commands give, as they are: it cannot drift from what imagebuild
// does.
func TestMigrationGuideShowsWhatTheTestsDo(t *testing.T) {
	guide, err := os.ReadFile("../../docs/migrating-from-flatcar-and-fcos.md")
	require.NoError(t, err)
	for _, f := range []string{
		filepath.Join(configs, "flatcar.clc.yaml"),
		filepath.Join(configs, "flatcar.bu"),
		filepath.Join(configs, "fcos.bu"),
		filepath.Join(migration, "machine.yaml"),
		filepath.Join(migration, "node-1.clc.disk.yaml"),
	} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.Contains(t, string(guide), "```yaml\n"+strings.TrimRight(string(data), "\n")+"\n```", f)
	}

	machine, err := filepath.Abs(filepath.Join(migration, "machine.yaml"))
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	for name, text := range map[string]string{
		"disks.clc.yaml": "storage:\n  disks:\n    - device: /dev/sdb\n      wipe_table: true\n",
		"typo.bu":        "variant: fcos\nversion: 1.6.0\nsystemd:\n  units:\n    - name: app.service\n      enabeld: true\n",
	} {
		require.NoError(t, os.WriteFile(name, []byte(text), 0o644))
		_, err := runConfig(t, "disk", "-o", "node-1.img", "--ignition", name, machine)
		require.Error(t, err)
		assert.Contains(t, string(guide), "$ imagebuild config disk -o node-1.img --ignition "+name+" machine.yaml\nimagebuild: "+err.Error()+"\n")
	}
}
