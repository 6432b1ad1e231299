package transpile

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

var update = flag.Bool("update", false, "rewrite the golden Ignition configs under testdata/golden")

// Keys from pkg/contract/machineconfig's tests (their private keys were
// discarded), as in testdata.
const (
	aliceKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop"
	bobKey   = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBJNYzx3TjxpZe/H+GNiqnc6BIvsbVSoNkgdQ9fqENZuOyLHB0b0p5ttIFasJfF5//9q0tAlXkv/uFngvnYoKwU= bob@desk"
)

const appUnitHead = "[Unit]\nDescription=The app\n"

// Each real config of testdata translates to its golden Ignition config
// (go test -update rewrites them), which Terrarium's Ignition path takes
// with its user and keys, its files with their contents and its units.
func TestTranslateGolden(t *testing.T) {
	for _, tc := range []struct {
		file    string
		kind    Kind
		version string
		// users are the users and their keys.
		users map[string][]string
		// files are the files and their contents.
		files map[string]string
		units []string
	}{
		{
			file: "flatcar.clc.yaml", kind: KindCLC, version: "3.0.0",
			users: map[string][]string{"ops": {aliceKey, bobKey}},
			files: map[string]string{"/etc/app/app.conf": "listen=8080\ndata=/var/lib/app\n"},
			units: []string{"app.service", "containerd.service"},
		},
		{
			file: "flatcar.bu", kind: KindButane, version: "3.4.0",
			users: map[string][]string{"ops": {aliceKey, bobKey}},
			files: map[string]string{"/etc/app/app.conf": "listen=8080\ndata=/var/lib/app\n"},
			units: []string{"app.service", "containerd.service"},
		},
		{
			file: "fcos.bu", kind: KindButane, version: "3.5.0",
			users: map[string][]string{"ops": {aliceKey}},
			files: map[string]string{
				"/etc/app/app.conf":  "listen=8080\ndata=/var/lib/app\n",
				"/etc/motd.d/10-app": "This node runs the app. Its data is in /var/lib/app.\n",
			},
			units: []string{"app.service"},
		},
		{
			file: "fcos.ign", kind: KindIgnition, version: "3.4.0",
			users: map[string][]string{"ops": {aliceKey}},
			files: map[string]string{"/etc/app/app.conf": "listen=8080\n"},
			units: []string{"app.service"},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.file))
			require.NoError(t, err)
			assert.Equal(t, tc.kind, Detect(in))
			r, err := Translate(tc.file, in, WithFilesDir("testdata"))
			require.NoError(t, err)
			assert.Equal(t, tc.kind, r.Kind)

			golden := filepath.Join("testdata", "golden", tc.file+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, append(r.Ignition, '\n'), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "go test -update writes it")
			assert.Equal(t, string(want), string(r.Ignition)+"\n")
			if tc.kind == KindIgnition {
				assert.Equal(t, in, r.Ignition, "Ignition passes through")
			}

			c := r.Config
			assert.Equal(t, tc.version, c.Version)
			users := map[string][]string{}
			for _, u := range c.Users {
				users[u.Name] = u.SSHAuthorizedKeys
				assert.Contains(t, u.Groups, "sudo")
			}
			assert.Equal(t, tc.users, users)
			files := map[string]string{}
			for _, f := range c.Files {
				files[f.Path] = string(f.Contents)
			}
			assert.Equal(t, tc.files, files)
			var units []string
			for _, u := range c.Units {
				units = append(units, u.Name)
				if u.Name == "app.service" {
					assert.Contains(t, u.Contents, appUnitHead)
					require.NotNil(t, u.Enabled)
					assert.True(t, *u.Enabled)
				}
			}
			assert.Equal(t, tc.units, units)
		})
	}
}

// The same node in a CLC and in Butane for Flatcar is the same plan:
// what a Flatcar user gets does not depend on which they bring.
func TestCLCAndFlatcarButaneAgree(t *testing.T) {
	plan := func(file string) *ignitionspec.Config {
		in, err := os.ReadFile(filepath.Join("testdata", file))
		require.NoError(t, err)
		r, err := Translate(file, in)
		require.NoError(t, err)
		r.Config.Version = ""
		return r.Config
	}
	assert.Equal(t, plan("flatcar.clc.yaml"), plan("flatcar.bu"))
}

// Every stable version of the fcos and flatcar variants Butane v0.23.0
// has is taken, each making the Ignition spec Butane's docs name.
func TestButaneVersions(t *testing.T) {
	for _, tc := range []struct{ variant, version, ignition string }{
		{"fcos", "1.0.0", "3.0.0"},
		{"fcos", "1.1.0", "3.1.0"},
		{"fcos", "1.2.0", "3.2.0"},
		{"fcos", "1.3.0", "3.2.0"},
		{"fcos", "1.4.0", "3.3.0"},
		{"fcos", "1.5.0", "3.4.0"},
		{"fcos", "1.6.0", "3.5.0"},
		{"flatcar", "1.0.0", "3.3.0"},
		{"flatcar", "1.1.0", "3.4.0"},
	} {
		t.Run(tc.variant+"-"+tc.version, func(t *testing.T) {
			in := "variant: " + tc.variant + "\nversion: " + tc.version + "\n" +
				"passwd:\n  users:\n    - name: ops\n      ssh_authorized_keys: [\"" + aliceKey + "\"]\n" +
				"storage:\n  files:\n    - path: /etc/app/app.conf\n      contents:\n        inline: hi\n"
			r, err := Translate("v.bu", []byte(in))
			require.NoError(t, err)
			assert.Equal(t, tc.ignition, r.Config.Version)
			require.Len(t, r.Config.Files, 1)
			assert.Equal(t, "hi", string(r.Config.Files[0].Contents))
		})
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Kind
	}{
		{"ignition", `{"ignition": {"version": "3.4.0"}}`, KindIgnition},
		{"ignition after a BOM and blank lines", "\xef\xbb\xbf\n\n  {}", KindIgnition},
		{"butane", "variant: fcos\nversion: 1.6.0\n", KindButane},
		{"butane with a variant only", "variant: flatcar\nstorage: {}\n", KindButane},
		{"butane with a version only", "version: 1.6.0\nstorage: {}\n", KindButane},
		{"butane that does not parse", "variant: fcos\nversion: 1.6.0\nstorage: [\n", KindButane},
		{"clc", "passwd:\n  users:\n    - name: ops\n", KindCLC},
		{"clc with its version 0", "version: 0\nsystemd: {}\n", KindCLC},
		{"clc of Container Linux's own sections", "etcd:\n  version: 3.5.0\n", KindCLC},
		{"empty", "", KindUnknown},
		{"blank", " \n\t\n", KindUnknown},
		{"machine config", "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\n", KindUnknown},
		{"machine config with its ignition field", "\"apiVersion\": terrarium.dev/v1alpha1\nkind: MachineConfig\nignition: '{}'\n", KindUnknown},
		{"a list", "- a\n- b\n", KindUnknown},
		{"text", "hello world", KindUnknown},
		{"not yaml", "a: [\n", KindUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Detect([]byte(tc.in)))
		})
	}
}

// Place puts the problems of a later check, CheckMachineConfig's here, at
// the source's line and column.
func TestPlace(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "flatcar.clc.yaml"))
	require.NoError(t, err)
	r, err := Translate("flatcar.clc.yaml", in)
	require.NoError(t, err)
	err = r.Place(r.Config.CheckMachineConfig(&machineconfig.Config{Admin: &machineconfig.Admin{Name: "ops"}}))
	require.ErrorIs(t, err, ignitionspec.ErrConflict)
	assert.Contains(t, err.Error(), "flatcar.clc.yaml:7:7: $.passwd.users[0].name: ops is the machine config's admin")
	assert.NoError(t, r.Place(nil))
	other := errors.New("other")
	assert.Equal(t, Problems{{File: "flatcar.clc.yaml", Path: "$", Message: "other", Err: other}}, r.Place(other))
}

// ct's warnings that only state its defaults (files 0644, directories
// 0755: Terrarium's too) are not refused.
func TestCLCModeDefaults(t *testing.T) {
	r, err := Translate("modes.clc", []byte("storage:\n  directories:\n    - path: /var/lib/app\n      filesystem: root\n"+
		"  files:\n    - path: /etc/app.conf\n      filesystem: root\n      contents:\n        inline: x\n"))
	require.NoError(t, err)
	require.Len(t, r.Config.Files, 1)
	require.Len(t, r.Config.Directories, 1)
	assert.Equal(t, fs.FileMode(0o644), r.Config.Files[0].Mode)
	assert.Equal(t, fs.FileMode(0o755), r.Config.Directories[0].Mode)
	assert.True(t, r.Config.Files[0].Overwrite, "Ignition 2 files replace what is there")
}
