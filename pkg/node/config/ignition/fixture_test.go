package ignition

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// fullConfig and its parts are the fixture of ignitionspec's parse tests,
// repeated here so that each package's tests stand alone.

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
