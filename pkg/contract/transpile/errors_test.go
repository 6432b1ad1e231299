package transpile

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// user is a Butane or CLC user with a key, for configs that are about
// something else.
const user = "passwd:\n  users:\n    - name: ops\n      ssh_authorized_keys: [\"" + aliceKey + "\"]\n"

// Every problem names the file, the line and column the source shows it
// at (where the translator or the source tells), the path, and what to
// do: the translators' own reports and what Terrarium refuses alike.
func TestTranslateErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		in   string
		kind error
		// want are lines of the error, each whole.
		want []string
	}{
		// Butane: what Terrarium does not apply, at the Butane line.
		{
			name: "butane storage.disks", file: "disks.bu", kind: ignitionspec.ErrUnsupported,
			in:   "variant: fcos\nversion: 1.6.0\n" + user + "storage:\n  disks:\n    - device: /dev/vdb\n      wipe_table: true\n",
			want: []string{"disks.bu:8:3: $.storage.disks: Terrarium does not partition disks; use the build spec"},
		},
		{
			name: "butane raid, filesystems and luks", file: "raid.bu", kind: ignitionspec.ErrUnsupported,
			in: "variant: fcos\nversion: 1.6.0\nstorage:\n" +
				"  raid:\n    - name: data\n      level: raid1\n      devices: [/dev/vdb, /dev/vdc]\n" +
				"  luks:\n    - name: secret\n      device: /dev/md/data\n" +
				"  filesystems:\n    - device: /dev/mapper/secret\n      format: ext4\n      path: /var/data\n",
			want: []string{
				"raid.bu:4:3: $.storage.raid: Terrarium does not assemble RAID arrays; the disk layout is the build spec's",
				"raid.bu:11:3: $.storage.filesystems: Terrarium does not make or mount file systems from a config; " +
					"the disk layout is the build spec's (a .mount unit in systemd.units can mount one that exists)",
				"raid.bu:8:3: $.storage.luks: Terrarium does not set up LUKS volumes; the disk layout is the build spec's",
			},
		},
		{
			name: "butane boot_device, Butane's own sugar", file: "mirror.bu", kind: ignitionspec.ErrUnsupported,
			in: "variant: fcos\nversion: 1.6.0\nboot_device:\n  mirror:\n    devices: [/dev/vda, /dev/vdb]\n",
			want: []string{
				"mirror.bu:5:5: $.storage.disks: Terrarium does not partition disks; use the build spec",
				"mirror.bu:4:3: $.storage.raid: Terrarium does not assemble RAID arrays; the disk layout is the build spec's",
				"mirror.bu:3:1: $.storage.filesystems: Terrarium does not make or mount file systems from a config; " +
					"the disk layout is the build spec's (a .mount unit in systemd.units can mount one that exists)",
			},
		},
		{
			name: "butane kernel_arguments", file: "kargs.bu", kind: ignitionspec.ErrUnsupported,
			in:   "variant: fcos\nversion: 1.6.0\nkernel_arguments:\n  should_exist: [quiet]\n",
			want: []string{"kargs.bu:3:1: $.kernelArguments: the kernel command line is part of the signed slot; set it in the build spec"},
		},
		{
			name: "butane remote source and password", file: "remote.bu", kind: ignitionspec.ErrUnsupported,
			in: "variant: fcos\nversion: 1.6.0\npasswd:\n  users:\n    - name: ops\n      password_hash: $y$j9T$abc\n" +
				"storage:\n  files:\n    - path: /etc/app.conf\n      contents:\n        source: https://example.com/app.conf\n",
			want: []string{
				"remote.bu:6:7: $.passwd.users[0].passwordHash: Terrarium accounts have no password and log in with SSH keys only (like the machine config's admin); remove it",
				"remote.bu:11:9: $.storage.files[0].contents.source: https URLs are not fetched: the node is air-gapped; " +
					"give the contents inline as a data: URL (Butane's contents.local or contents.inline does this)",
			},
		},
		{
			name: "butane path outside the writable trees", file: "usr.bu", kind: ignitionspec.ErrUnsupported,
			in:   "variant: flatcar\nversion: 1.1.0\nstorage:\n  files:\n    - path: /usr/bin/app\n      contents:\n        inline: x\n",
			want: []string{"usr.bu:5:7: $.storage.files[0].path: /usr/bin/app is in the read-only slot (/usr); write under /etc, /var, /opt, /home, /root, /srv or /usr/local"},
		},
		// Butane: its own report.
		{
			name: "butane unknown key", file: "typo.bu", kind: ErrInvalid,
			in:   "variant: fcos\nversion: 1.6.0\nstorage:\n  files:\n    - path: /etc/app.conf\n      contnts:\n        inline: x\n",
			want: []string{"typo.bu:6:7: $.storage.files[0].contnts: warning: unused key contnts; it is not in this Butane spec: fix its spelling, or remove it"},
		},
		{
			name: "butane decimal mode", file: "mode.bu", kind: ErrInvalid,
			in: "variant: fcos\nversion: 1.6.0\nstorage:\n  files:\n    - path: /etc/app.conf\n      mode: 644\n",
			want: []string{
				"mode.bu:6:13: $.storage.files[0].mode: warning: unreasonable mode would be reasonable if specified in octal; remember to add a leading zero",
				// 644 is 0o1204: the sticky bit.
				"mode.bu:6:13: $.storage.files[0].mode: warning: setuid/setgid/sticky bits are not supported or functional in spec versions older than 3.6.0",
			},
		},
		{
			name: "butane wrong type", file: "type.bu", kind: ErrInvalid,
			in:   "variant: fcos\nversion: 1.6.0\npasswd:\n  users:\n    - name: ops\n      uid: lots\n",
			want: []string{"type.bu:6: cannot unmarshal !!str `lots` into int"},
		},
		{
			name: "butane syntax error", file: "syntax.bu", kind: ErrInvalid,
			in:   "variant: fcos\nversion: 1.6.0\nstorage:\n  files: [\n",
			want: []string{"syntax.bu:4: did not find expected node content"},
		},
		{
			name: "butane local file without a files directory", file: "local.bu", kind: ErrInvalid,
			in: "variant: fcos\nversion: 1.6.0\nstorage:\n  files:\n    - path: /etc/motd\n      contents:\n        local: motd\n",
			want: []string{"local.bu:7:16: $.storage.files[0].contents.local: local file paths are relative to a files directory that must be specified with -d/--files-dir " +
				"(Terrarium reads them from the directory of the Butane file)"},
		},
		{
			name: "butane variant of another system", file: "openshift.bu", kind: ignitionspec.ErrUnsupported,
			in:   "variant: openshift\nversion: 4.18.0\n",
			want: []string{`openshift.bu:1:1: $.variant: "openshift" is not taken: Terrarium takes Butane's fcos and flatcar variants (openshift, r4e and fiot configs are for those systems); write it as variant: fcos`},
		},
		{
			name: "butane experimental version", file: "exp.bu", kind: ignitionspec.ErrVersion,
			in:   "variant: fcos\nversion: 1.7.0-experimental\n",
			want: []string{"exp.bu:2:1: $.version: fcos 1.7.0-experimental makes an experimental Ignition spec, which Terrarium does not take (it may still change); write version: 1.6.0"},
		},
		{
			name: "butane unknown version", file: "v9.bu", kind: ignitionspec.ErrVersion,
			in:   "variant: flatcar\nversion: 9.0.0\n",
			want: []string{"v9.bu:2:1: $.version: Butane v0.23.0 has no flatcar version 9.0.0; flatcar versions 1.0.0 and 1.1.0 are taken"},
		},
		{
			name: "butane without a variant", file: "novariant.bu", kind: ErrInvalid,
			in:   "version: 1.6.0\nstorage: {}\n",
			want: []string{"novariant.bu: $.variant: missing; a Butane config names its variant: fcos or flatcar"},
		},
		// Container Linux Configs.
		{
			name: "clc storage.disks", file: "disks.clc", kind: ignitionspec.ErrUnsupported,
			in:   user + "storage:\n  disks:\n    - device: /dev/vdb\n      wipe_table: true\n",
			want: []string{"disks.clc:6:3: $.storage.disks: Terrarium does not partition disks; use the build spec"},
		},
		{
			name: "clc file system and a file on it", file: "fs.clc", kind: ignitionspec.ErrUnsupported,
			in: "storage:\n  filesystems:\n    - name: data\n      mount:\n        device: /dev/vdb\n        format: ext4\n" +
				"  files:\n    - path: /app.conf\n      filesystem: data\n      contents:\n        inline: x\n",
			want: []string{
				"fs.clc:2:3: $.storage.filesystems: Terrarium does not make or mount file systems from a config; " +
					"the disk layout is the build spec's (a .mount unit in systemd.units can mount one that exists)",
				"fs.clc:8:7: $.storage.files[0].path: /data/app.conf is outside the appliance's writable trees (/etc, /var, /opt, /home, /root, /srv or /usr/local): the root is the read-only slot",
			},
		},
		{
			name: "clc remote contents", file: "remote.clc", kind: ignitionspec.ErrUnsupported,
			in: "storage:\n  files:\n    - path: /etc/app.conf\n      filesystem: root\n      contents:\n        remote:\n          url: http://example.com/app.conf\n",
			want: []string{"remote.clc:5:7: $.storage.files[0].contents.source: http URLs are not fetched: the node is air-gapped; " +
				"give the contents inline as a data: URL (Butane's contents.local or contents.inline does this)"},
		},
		{
			name: "clc sections of Container Linux", file: "etcd.clc", kind: ignitionspec.ErrUnsupported,
			in: "etcd:\n  version: 3.5.0\nupdate:\n  group: stable\nlocksmith:\n  reboot_strategy: reboot\n" +
				"networkd:\n  units:\n    - name: 00-eth0.network\n      contents: \"[Match]\\nName=eth0\\n\"\n",
			want: []string{
				"etcd.clc:1:1: $.etcd: Terrarium runs etcd itself, as a static pod of the control plane (the machine config's cluster:); remove etcd:",
				"etcd.clc:3:1: $.update: Terrarium is upgraded by swapping its image (signed upgrade files), not by update_engine; remove update:",
				"etcd.clc:5:1: $.locksmith: Terrarium's upgrades reboot one node at a time under a Lease in the cluster, not through locksmith; remove locksmith:",
				"etcd.clc:7:1: $.networkd: Ignition 3 has no networkd section; set the node's network in the machine config's network:, " +
					"or write the units as storage.files under /etc/systemd/network",
			},
		},
		{
			name: "clc unknown key", file: "typo.clc", kind: ErrInvalid,
			in:   "systemd:\n  units:\n    - name: app.service\n      enabeld: true\n",
			want: []string{"typo.clc:4:7: warning: Config has unrecognized key: enabeld; it is not in the Container Linux Config spec: fix its spelling, or remove it"},
		},
		{
			name: "clc wrong type", file: "type.clc", kind: ErrInvalid,
			in:   "passwd:\n  users:\n    - name: ops\n      uid: lots\n",
			want: []string{"type.clc:4: cannot unmarshal !!str `lots` into int"},
		},
		{
			name: "clc ign-converter cannot convert", file: "dup.clc", kind: ErrInvalid,
			in: "storage:\n  files:\n    - path: /etc/a\n      filesystem: root\n    - path: /etc/a\n      filesystem: root\n",
			want: []string{`dup.clc: ign-converter: Config has conflicting inodes: "File: /etc/a" and "File: /etc/a".  ` +
				"All files, directories and links must specify a unique `path`."},
		},
		// Ignition JSON: problems at its JSON lines too.
		{
			name: "ignition storage.disks", file: "disks.ign", kind: ignitionspec.ErrUnsupported,
			in:   "{\"ignition\": {\"version\": \"3.4.0\"},\n \"storage\": {\n  \"disks\": [{\"device\": \"/dev/vdb\", \"wipeTable\": true}]}}\n",
			want: []string{"disks.ign:3:3: $.storage.disks: Terrarium does not partition disks; use the build spec"},
		},
		{
			name: "ignition spec 2", file: "old.ign", kind: ignitionspec.ErrVersion,
			in: `{"ignition": {"version": "2.2.0"}}`,
			want: []string{`old.ign: ignition config: $.ignition.version: "2.2.0": unsupported spec version: this is an Ignition spec 2 config; ` +
				"convert it to spec 3 with ign-converter (or write it in Butane and compile it with butane), then use the 3.x config"},
		},
		// None of them.
		{
			name: "empty", file: "empty", kind: ErrUnknownFormat, in: "\n",
			want: []string{"empty: the file is empty; give an Ignition config (JSON), a Butane config (variant: fcos or flatcar) or a Container Linux Config"},
		},
		{
			name: "machine config", file: "machine.yaml", kind: ErrUnknownFormat,
			in: "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\n",
			want: []string{"machine.yaml: this is a machine config (apiVersion, kind), not an Ignition, Butane or Container Linux Config; " +
				"pass it as MACHINE.yaml, and the Ignition part as its own file"},
		},
		{
			name: "other yaml", file: "other.yaml", kind: ErrUnknownFormat, in: "hosts: [a, b]\n",
			want: []string{"other.yaml: not an Ignition config (a JSON object), a Butane config (variant: and version:) " +
				"or a Container Linux Config (passwd:, storage:, systemd:, networkd: ...): none of its top-level keys is one of theirs"},
		},
		{
			name: "not yaml", file: "junk", kind: ErrUnknownFormat, in: "a: b\n c: [\n",
			want: []string{"junk:2: not JSON, and not YAML either (mapping values are not allowed in this context); " +
				"give an Ignition config (JSON), a Butane config or a Container Linux Config"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Translate(tc.file, []byte(tc.in))
			require.Error(t, err)
			assert.Nil(t, r)
			assert.ErrorIs(t, err, tc.kind)
			var ps Problems
			require.True(t, errors.As(err, &ps), "%T", err)
			for _, p := range ps {
				assert.Equal(t, tc.file, p.File)
			}
			assert.Equal(t, tc.want, strings.Split(err.Error(), "\n"))
		})
	}
}
