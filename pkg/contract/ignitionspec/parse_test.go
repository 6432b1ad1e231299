package ignitionspec

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Keys from pkg/machineconfig's tests (their private keys were discarded).
const (
	testKey1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop"
	testKey2 = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBJNYzx3TjxpZe/H+GNiqnc6BIvsbVSoNkgdQ9fqENZuOyLHB0b0p5ttIFasJfF5//9q0tAlXkv/uFngvnYoKwU="
)

const appUnit = "[Unit]\nDescription=App\n\n[Service]\nExecStart=/usr/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n"

// fullConfig has a group, a user with keys and groups, a directory, a file
// as a plain data: URL and one gzip-compressed, a symlink, a unit with
// contents, enabled and a drop-in, and a drop-in for a unit of the image.
var fullConfig = `{
  "ignition": {"version": "3.4.0"},
  "passwd": {
    "groups": [{"name": "app"}],
    "users": [{
      "name": "ops",
      "sshAuthorizedKeys": ["` + testKey1 + `", "` + testKey2 + `"],
      "groups": ["sudo", "app"],
      "shell": "/bin/bash"
    }]
  },
  "storage": {
    "directories": [{"path": "/var/lib/app", "mode": 488, "user": {"name": "ops"}, "group": {"name": "app"}}],
    "files": [
      {"path": "/var/lib/app/seed.txt", "user": {"name": "ops"},
       "contents": {"source": "` + gzipDataURL("seed data\n") + `", "compression": "gzip",
                    "verification": {"hash": "sha256-` + sha256Hex("seed data\n") + `"}}},
      {"path": "/etc/app/app.conf", "mode": 416, "contents": {"source": "data:,listen%3D8080%0A"}}
    ],
    "links": [{"path": "/etc/app/current", "target": "/var/lib/app"}]
  },
  "systemd": {
    "units": [
      {"name": "app.service", "enabled": true, "contents": ` + jsonString(appUnit) + `,
       "dropins": [{"name": "10-env.conf", "contents": "[Service]\nEnvironment=A=1\n"}]},
      {"name": "containerd.service", "dropins": [{"name": "50-limits.conf", "contents": "[Service]\nLimitNOFILE=1048576\n"}]}
    ]
  }
}`

func gzipDataURL(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return "data:;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func jsonString(s string) string {
	r := strings.NewReplacer("\\", "\\\\", "\"", "\\\"", "\n", "\\n")
	return `"` + r.Replace(s) + `"`
}

func TestParseMapsWhatTerrariumApplies(t *testing.T) {
	c, err := Parse([]byte(fullConfig))
	require.NoError(t, err)
	assert.Equal(t, "3.4.0", c.Version)

	require.Len(t, c.Groups, 1)
	assert.Equal(t, "app", c.Groups[0].Name)
	require.Len(t, c.Users, 1)
	u := c.Users[0]
	assert.Equal(t, "ops", u.Name)
	assert.Equal(t, []string{"sudo", "app"}, u.Groups)
	assert.Equal(t, []string{testKey1, testKey2}, u.SSHAuthorizedKeys)
	assert.Equal(t, "/bin/bash", u.Shell)

	require.Len(t, c.Directories, 1)
	assert.Equal(t, Directory{Path: "/var/lib/app", Mode: 0o750, Owner: Owner{User: "ops", Group: "app"}, At: "$.storage.directories[0]"}, c.Directories[0])

	require.Len(t, c.Files, 2)
	// Sorted by path.
	assert.Equal(t, "/etc/app/app.conf", c.Files[0].Path)
	assert.Equal(t, "listen=8080\n", string(c.Files[0].Contents))
	assert.Equal(t, fs.FileMode(0o640), c.Files[0].Mode)
	assert.Equal(t, "seed data\n", string(c.Files[1].Contents), "gzip data: URL decoded")
	assert.Equal(t, fs.FileMode(0o644), c.Files[1].Mode, "Ignition's default mode")
	assert.True(t, c.Files[1].HasContents)

	require.Len(t, c.Links, 1)
	assert.Equal(t, "/var/lib/app", c.Links[0].Target)

	require.Len(t, c.Units, 2)
	assert.Equal(t, appUnit, c.Units[0].Contents)
	require.NotNil(t, c.Units[0].Enabled)
	assert.True(t, *c.Units[0].Enabled)
	assert.Equal(t, []Dropin{{Name: "10-env.conf", Contents: "[Service]\nEnvironment=A=1\n"}}, c.Units[0].Dropins)
	assert.Empty(t, c.Units[1].Contents)
	assert.Nil(t, c.Units[1].Enabled)
}

// Older 3.x specs are translated up by the library.
func TestParseTakesOlderSpecs(t *testing.T) {
	for _, v := range []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"} {
		t.Run(v, func(t *testing.T) {
			c, err := Parse([]byte(`{"ignition": {"version": "` + v + `"},
				"storage": {"files": [{"path": "/etc/motd", "contents": {"source": "data:,hello"}}]}}`))
			require.NoError(t, err)
			assert.Equal(t, v, c.Version)
			require.Len(t, c.Files, 1)
			assert.Equal(t, "hello", string(c.Files[0].Contents))
		})
	}
}

func TestParseEmptyFileAndDropinWithoutContents(t *testing.T) {
	c, err := Parse([]byte(`{"ignition": {"version": "3.5.0"},
		"storage": {"files": [{"path": "/etc/empty"}, {"path": "/etc/zero", "contents": {"source": "data:,"}}]},
		"systemd": {"units": [{"name": "containerd.service", "dropins": [{"name": "a.conf"}]}]}}`))
	require.NoError(t, err)
	assert.False(t, c.Files[0].HasContents, "no source: the file is created empty, or left")
	assert.True(t, c.Files[1].HasContents)
	assert.Equal(t, []byte{}, c.Files[1].Contents)
	assert.Empty(t, c.Units[0].Dropins, "a drop-in without contents is not written (as in Ignition)")
}

// Every section Terrarium does not apply is refused by its path, with
// what to do instead.
func TestParseRefusesByName(t *testing.T) {
	tests := []struct {
		name, json, path, says string
	}{
		{"disks", `"storage": {"disks": [{"device": "/dev/vda", "wipeTable": true}]}`, "$.storage.disks", "does not partition disks; use the build spec"},
		{"raid", `"storage": {"raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/vda", "/dev/vdb"]}]}`, "$.storage.raid", "RAID"},
		{"filesystems", `"storage": {"filesystems": [{"device": "/dev/vdb", "format": "ext4", "path": "/var/data"}]}`, "$.storage.filesystems", ".mount unit"},
		{"luks", `"storage": {"luks": [{"name": "data", "device": "/dev/vdb"}]}`, "$.storage.luks", "LUKS"},
		{"kernel arguments", `"kernelArguments": {"shouldExist": ["quiet"]}`, "$.kernelArguments", "build spec"},
		{"merge", `"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://example.com/x.ign"}]}}`, "$.ignition.config.merge", "air-gapped"},
		{"merge inline", `"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "data:,{}"}]}}`, "$.ignition.config.merge", "does not merge configs"},
		{"replace", `"ignition": {"version": "3.4.0", "config": {"replace": {"source": "http://example.com/x.ign"}}}`, "$.ignition.config.replace", "air-gapped"},
		{"tls", `"ignition": {"version": "3.4.0", "security": {"tls": {"certificateAuthorities": [{"source": "https://example.com/ca.pem"}]}}}`, "$.ignition.security.tls.certificateAuthorities", "air-gapped"},
		{"proxy", `"ignition": {"version": "3.4.0", "proxy": {"httpsProxy": "https://proxy.example.com"}}`, "$.ignition.proxy", "air-gapped"},
		{"https source", file(`"contents": {"source": "https://example.com/motd"}`), "$.storage.files[0].contents.source", "https URLs are not fetched: the node is air-gapped"},
		{"http source", file(`"contents": {"source": "http://example.com/motd"}`), "$.storage.files[0].contents.source", "http URLs"},
		{"s3 source", file(`"contents": {"source": "s3://bucket/motd"}`), "$.storage.files[0].contents.source", "s3 URLs"},
		{"gs source", file(`"contents": {"source": "gs://bucket/motd"}`), "$.storage.files[0].contents.source", "gs URLs"},
		{"tftp source", file(`"contents": {"source": "tftp://10.0.0.1/motd"}`), "$.storage.files[0].contents.source", "tftp URLs"},
		{"append", file(`"append": [{"source": "data:,more"}]`), "$.storage.files[0].append", "an append would repeat"},
		{"hard link", `"storage": {"links": [{"path": "/etc/b", "target": "/etc/a", "hard": true}]}`, "$.storage.links[0].hard", "symbolic links only"},
		{"user passwordHash", `"passwd": {"users": [{"name": "ops", "passwordHash": "$6$x$y"}]}`, "$.passwd.users[0].passwordHash", "SSH keys only"},
		{"group passwordHash", `"passwd": {"groups": [{"name": "app", "passwordHash": "$6$x$y"}]}`, "$.passwd.groups[0].passwordHash", "no password"},
		{"delete user", `"passwd": {"users": [{"name": "ops", "shouldExist": false}]}`, "$.passwd.users[0].shouldExist", "does not delete"},
		{"uid 0", `"passwd": {"users": [{"name": "toor", "uid": 0}]}`, "$.passwd.users[0].uid", "second root"},
		{"/usr", `"storage": {"files": [{"path": "/usr/bin/tool", "contents": {"source": "data:,x"}}]}`, "$.storage.files[0].path", "read-only slot (/usr)"},
		{"/proc", `"storage": {"files": [{"path": "/proc/sys/vm/swappiness", "contents": {"source": "data:,1"}}]}`, "$.storage.files[0].path", "kernel file system"},
		{"/boot", `"storage": {"directories": [{"path": "/boot/extra"}]}`, "$.storage.directories[0].path", "boot loader"},
		{"/state", `"storage": {"files": [{"path": "/state/x", "contents": {"source": "data:,x"}}]}`, "$.storage.files[0].path", "TERRA-STATE"},
		{"/bin", `"storage": {"links": [{"path": "/bin/tool", "target": "/var/tool"}]}`, "$.storage.links[0].path", "writable trees"},
		{"/etc itself", `"storage": {"directories": [{"path": "/etc", "mode": 448}]}`, "$.storage.directories[0].path", "tree of the appliance"},
		{"/etc/passwd", `"storage": {"files": [{"path": "/etc/passwd", "overwrite": true, "contents": {"source": "data:,x"}}]}`, "$.storage.files[0].path", "passwd.users"},
		{"/etc/hostname", `"storage": {"files": [{"path": "/etc/hostname", "contents": {"source": "data:,n1"}}]}`, "$.storage.files[0].path", "machine config's hostname"},
		{"terrarium unit", `"systemd": {"units": [{"name": "terrarium-firstboot.service", "mask": true}]}`, "$.systemd.units[0].name", "Terrarium's own units"},
		{"home in /usr", `"passwd": {"users": [{"name": "ops", "homeDir": "/usr/ops"}]}`, "$.passwd.users[0].homeDir", "read-only slot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := `{"ignition": {"version": "3.4.0"}, ` + tt.json + `}`
			if strings.HasPrefix(tt.json, `"ignition"`) {
				data = `{` + tt.json + `}`
			}
			_, err := Parse([]byte(data))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrUnsupported)
			assert.Contains(t, err.Error(), tt.path+": ")
			assert.Contains(t, err.Error(), tt.says)
		})
	}
}

// file is a storage.files entry at /etc/motd with more keys.
func file(keys string) string {
	return `"storage": {"files": [{"path": "/etc/motd", ` + keys + `}]}`
}

// One error lists every refused path.
func TestParseRefusesAllAtOnce(t *testing.T) {
	_, err := Parse([]byte(`{"ignition": {"version": "3.5.0"},
		"storage": {"disks": [{"device": "/dev/vda"}], "luks": [{"name": "d", "device": "/dev/vdb"}],
		            "files": [{"path": "/usr/x", "contents": {"source": "https://example.com/x"}}]},
		"passwd": {"users": [{"name": "ops", "passwordHash": "x"}]}}`))
	require.Error(t, err)
	var ps Problems
	require.ErrorAs(t, err, &ps)
	var paths []string
	for _, p := range ps {
		paths = append(paths, p.Path)
	}
	assert.ElementsMatch(t, []string{
		"$.storage.disks", "$.storage.luks", "$.storage.files[0].path", "$.storage.files[0].contents.source", "$.passwd.users[0].passwordHash",
	}, paths)
	assert.True(t, strings.HasPrefix(err.Error(), "ignition config: 5 problems:\n\t"), err.Error())
}

func TestParseMalformed(t *testing.T) {
	tests := []struct {
		name, data string
		kind       error
		says       []string
	}{
		{"not JSON", "{\n  \"ignition\": {\"version\": \"3.4.0\"},\n  oops\n}", ErrMalformed,
			[]string{"not JSON at line 3 col 3 (offset 40)", "invalid character 'o'"}},
		{"an array", `[1, 2]`, ErrMalformed, []string{"not a JSON object at line 1 col 1"}},
		{"no version", `{"storage": {}}`, ErrMalformed, []string{"$.ignition.version", "missing"}},
		{"spec 2", `{"ignition": {"version": "2.2.0"}}`, ErrVersion, []string{`"2.2.0"`, "spec 2", "ign-converter", "spec 3"}},
		{"spec 1", `{"ignition": {"version": "1"}}`, ErrVersion, []string{"ign-converter"}},
		{"experimental", `{"ignition": {"version": "3.6.0-experimental"}}`, ErrVersion, []string{"3.0.0 to 3.5.0"}},
		{"spec 4", `{"ignition": {"version": "4.0.0"}}`, ErrVersion, []string{"3.0.0 to 3.5.0"}},
		{"not a version", `{"ignition": {"version": "3.x"}}`, ErrMalformed, []string{`$.ignition.version: "3.x"`, "not a version"}},
		{"unknown key", `{"ignition": {"version": "3.4.0"}, "storage": {"fils": []}}`, ErrMalformed,
			[]string{"$.storage.fils: unused key fils (line 1 col"}},
		{"relative path", `{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "etc/motd"}]}}`, ErrMalformed,
			[]string{"$.storage.files[0].path: path not absolute"}},
		{"bad data URL", file2(`"contents": {"source": "data:;base64,!!!"}`), ErrMalformed, []string{"$.storage.files[0].contents.source"}},
		{"hash mismatch", file2(`"contents": {"source": "data:,hello", "verification": {"hash": "sha256-` + sha256Hex("other") + `"}}`),
			ErrMalformed, []string{"$.storage.files[0].contents.verification.hash: the contents' sha256 is " + sha256Hex("hello")}},
		{"not gzip", file2(`"contents": {"source": "data:,hello", "compression": "gzip"}`), ErrMalformed, []string{"gzip"}},
		{"bad key", `{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "ops", "sshAuthorizedKeys": ["ssh-rsa nope"]}]}}`,
			ErrMalformed, []string{"$.passwd.users[0].sshAuthorizedKeys[0]: not an SSH public key"}},
		{"bad user name", `{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "Ops!"}]}}`, ErrMalformed,
			[]string{"$.passwd.users[0].name", "not an account name"}},
		{"unit without install", `{"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "a.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/true\n"}]}}`,
			ErrMalformed, []string{"$.systemd.units[0].contents", "no install section"}},
		{"unit name escaping", `{"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "../../x.service", "contents": "[Service]\n"}]}}`,
			ErrMalformed, []string{"$.systemd.units[0].name", "not a unit file name"}},
		{"mask and contents", `{"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "a.service", "mask": true, "contents": "[Service]\n"}]}}`,
			ErrMalformed, []string{"$.systemd.units[0].mask"}},
		{"file under a file", `{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/etc/a"}, {"path": "/etc/a/b"}]}}`,
			ErrMalformed, []string{"$.storage.files[1].path: /etc/a/b is under /etc/a, which is a file of the config"}},
		{"user and group of one name", `{"ignition": {"version": "3.4.0"}, "passwd": {"groups": [{"name": "ops"}], "users": [{"name": "ops"}]}}`,
			ErrMalformed, []string{"primaryGroup: ops"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.data))
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.kind)
			for _, s := range tt.says {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func file2(keys string) string {
	return `{"ignition": {"version": "3.4.0"}, ` + file(keys) + `}`
}

// An invalid config (to the library) still has what Terrarium refuses
// named.
func TestParseInvalidAndRefused(t *testing.T) {
	_, err := Parse([]byte(`{"ignition": {"version": "3.4.0"}, "storage": {"disks": [{"wipeTable": true}], "files": [{"path": "rel"}]}}`))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrMalformed)
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "$.storage.disks: Terrarium does not partition disks")
	assert.Contains(t, err.Error(), "$.storage.files[0].path: path not absolute")
}

func TestIsIgnition(t *testing.T) {
	tests := []struct {
		data string
		want bool
	}{
		{`{"ignition": {"version": "3.4.0"}}`, true},
		{"  \n{\"ignition\":{\"version\":\"2.2.0\"}}", true},
		{`{"ignition": {}}`, false},
		{`{"ignition": {"version": 3}}`, false},
		{"apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\n", false},
		{"#cloud-config\n", false},
		{`{"apiVersion": "terrarium.dev/v1alpha1"}`, false},
		{`{"ignition": {"version": "3.4.0"}`, false},
		{``, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, IsIgnition([]byte(tt.data)), tt.data)
	}
}
