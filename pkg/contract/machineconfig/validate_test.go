package machineconfig

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testKey is a real ed25519 public key (its private key was discarded).
const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy test@example"

// validConfig returns a valid config with every section set.
func validConfig() *Config {
	return &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		Hostname:   "node-1",
		Network: Network{Interfaces: []Interface{
			{Name: "enp0s2", Addresses: []string{"10.0.0.10/24", "fd00::10/64"}, Gateway: "10.0.0.1", DNS: []string{"10.0.0.1"}},
			{MACAddress: "52:54:00:12:34:56", DHCP: true},
		}},
		Admin: &Admin{Name: "admin", SSHAuthorizedKeys: []string{testKey}},
	}
}

// wireKey builds an authorized_keys line of type typ whose blob holds the
// type and then fields, each length-prefixed.
func wireKey(typ string, fields ...string) string {
	var blob []byte
	for _, f := range append([]string{typ}, fields...) {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(f)))
		blob = append(blob, f...)
	}
	return typ + " " + base64.StdEncoding.EncodeToString(blob)
}

func TestValidate(t *testing.T) {
	key32 := strings.Repeat("k", 32)
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string // "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no admin", func(c *Config) { c.Admin = nil }, ""},
		{"no network", func(c *Config) { c.Network = Network{} }, ""},
		{"missing header", func(c *Config) { c.APIVersion, c.Kind = "", "" },
			"$.apiVersion: required; set it to \"terrarium.dev/v1alpha1\"\n$.kind: required; set it to \"MachineConfig\""},
		{"hostname missing", func(c *Config) { c.Hostname = "" }, "$.hostname: required; set it to a DNS label like node-1"},
		{"hostname 63 chars", func(c *Config) { c.Hostname = strings.Repeat("a", 63) }, ""},
		{"hostname digits only", func(c *Config) { c.Hostname = "42" }, ""},
		{"hostname 64 chars", func(c *Config) { c.Hostname = strings.Repeat("a", 64) },
			"$.hostname: \"" + strings.Repeat("a", 64) + "\" is 64 characters long; a hostname has at most 63"},
		{"hostname upper case", func(c *Config) { c.Hostname = "Node-1" },
			"$.hostname: \"Node-1\" has upper-case letters; hostnames are lower-case, like \"node-1\""},
		{"hostname fqdn", func(c *Config) { c.Hostname = "node-1.example.com" },
			"$.hostname: \"node-1.example.com\" is a domain name, not a single DNS label; use just the host part, like \"node-1\""},
		{"hostname leading dash", func(c *Config) { c.Hostname = "-node" },
			"$.hostname: \"-node\" starts or ends with '-'; use 1-63 characters of a-z, 0-9 and '-', like node-1"},
		{"hostname underscore", func(c *Config) { c.Hostname = "node_1" },
			"$.hostname: \"node_1\" is not a valid hostname; use 1-63 characters of a-z, 0-9 and '-', like node-1"},
		{"glob name", func(c *Config) { c.Network.Interfaces[0].Name = "en*" }, ""},
		{"mac any case, duplicate ignores case", func(c *Config) {
			c.Network.Interfaces[0] = Interface{MACAddress: "52:54:00:12:34:56", DHCP: true}
			c.Network.Interfaces[1].MACAddress = "52:54:00:12:34:56"
			c.Network.Interfaces[1].MACAddress = strings.ToUpper(c.Network.Interfaces[1].MACAddress)
		}, "$.network.interfaces[1].macAddress: \"52:54:00:12:34:56\" is already used by $.network.interfaces[0].macAddress; each interface entry needs its own MAC address"},
		{"dhcp and static together", func(c *Config) { c.Network.Interfaces[0].DHCP = true }, ""},
		{"ipv4 /31 network address is a host", func(c *Config) {
			c.Network.Interfaces[0].Addresses = []string{"10.0.0.0/31"}
			c.Network.Interfaces[0].Gateway = "10.0.0.1"
		}, ""},
		{"ipv6 link-local gateway", func(c *Config) { c.Network.Interfaces[0].Gateway = "fe80::1" }, ""},
		{"ipv6 gateway in subnet", func(c *Config) { c.Network.Interfaces[0].Gateway = "fd00::1" }, ""},
		{"gateway is own address", func(c *Config) { c.Network.Interfaces[0].Gateway = "10.0.0.10" },
			"$.network.interfaces[0].gateway: 10.0.0.10 is this interface's own address; the gateway must be another host, like 10.0.0.1"},
		{"ipv6 gateway without ipv6 address", func(c *Config) {
			c.Network.Interfaces[0].Addresses = []string{"10.0.0.10/24"}
			c.Network.Interfaces[0].Gateway = "fe80::1"
		}, "$.network.interfaces[0].gateway: gateway fe80::1 needs a static IPv6 address on its subnet in addresses (with DHCP only, leave gateway out: the DHCP server provides it)"},
		{"gateway with zone", func(c *Config) { c.Network.Interfaces[0].Gateway = "fe80::1%eth0" },
			"$.network.interfaces[0].gateway: \"fe80::1%eth0\" is not an IP address (write it like 10.0.0.1)"},
		{"ipv6 address without prefix", func(c *Config) { c.Network.Interfaces[0].Addresses[1] = "fd00::10" },
			"$.network.interfaces[0].addresses[1]: \"fd00::10\" has no prefix length (write it like fd00::10/64)"},
		{"dns multicast", func(c *Config) { c.Network.Interfaces[0].DNS = []string{"224.0.0.1"} },
			"$.network.interfaces[0].dns[0]: 224.0.0.1 cannot be a name server; give the DNS server's address, like 10.0.0.1"},
		{"admin name empty without defaults", func(c *Config) { c.Admin.Name = "" },
			"$.admin.name: required; leave out admin.name to get the default, \"admin\""},
		{"admin name 32 chars", func(c *Config) { c.Admin.Name = "_" + strings.Repeat("a", 31) }, ""},
		{"admin name 33 chars", func(c *Config) { c.Admin.Name = strings.Repeat("a", 33) },
			"$.admin.name: \"" + strings.Repeat("a", 33) + "\" is not a valid user name; use 1-32 characters of a-z, 0-9, '_' and '-', starting with a letter or '_', like \"admin\""},
		{"admin name starts with digit", func(c *Config) { c.Admin.Name = "1ops" },
			"$.admin.name: \"1ops\" is not a valid user name; use 1-32 characters of a-z, 0-9, '_' and '-', starting with a letter or '_', like \"admin\""},
		{"admin name root", func(c *Config) { c.Admin.Name = "root" },
			"$.admin.name: \"root\" is a system account; pick another name, like \"admin\""},
		{"sk-ssh-ed25519 key", func(c *Config) {
			c.Admin.SSHAuthorizedKeys = []string{wireKey("sk-ssh-ed25519@openssh.com", key32, "ssh:")}
		}, ""},
		{"sk-ecdsa key", func(c *Config) {
			c.Admin.SSHAuthorizedKeys = []string{wireKey("sk-ecdsa-sha2-nistp256@openssh.com", "nistp256", "point", "ssh:")}
		}, ""},
		{"ed25519 key of wrong size", func(c *Config) { c.Admin.SSHAuthorizedKeys = []string{wireKey("ssh-ed25519", "short")} },
			"$.admin.sshAuthorizedKeys[0]: the key data holds a 5-byte ed25519 key; it must be 32 bytes"},
		{"ecdsa key with wrong curve", func(c *Config) {
			c.Admin.SSHAuthorizedKeys = []string{wireKey("ecdsa-sha2-nistp384", "nistp256", "point")}
		}, "$.admin.sshAuthorizedKeys[0]: the key data names curve \"nistp256\", but ecdsa-sha2-nistp384 keys use \"nistp384\""},
		{"key with trailing field", func(c *Config) { c.Admin.SSHAuthorizedKeys = []string{wireKey("ssh-rsa", "e", "n", "x")} },
			"$.admin.sshAuthorizedKeys[0]: the key data has 3 fields, but ssh-rsa keys have 2; paste the whole line of your .pub file again"},
		{"trusted keys", func(c *Config) { c.TrustedKeys = bare(trustedKey, otherTrustedKey) }, ""},
		{"trusted key twice", func(c *Config) { c.TrustedKeys = bare(trustedKey, otherTrustedKey, trustedKey) },
			"$.trustedKeys[2]: same key as $.trustedKeys[0]; list a key once, with all its purposes"},
		{"trusted key is an SSH key", func(c *Config) { c.TrustedKeys = bare(testKey) },
			"$.trustedKeys[0]: this is an SSH key, which does not sign configs; write it as ed25519:<base64 of 32 bytes>, the line of the .pub file from `imagebuild config keygen`"},
		{"every bad trusted key", func(c *Config) { c.TrustedKeys = bare("", trustedKey, "ed25519:AAAA") },
			"$.trustedKeys[0]: empty key; write it as ed25519:<base64 of 32 bytes>, the line of the .pub file from `imagebuild config keygen`\n" +
				"$.trustedKeys[2]: \"ed25519:AAAA\" holds 3 bytes; an ed25519 key has 32; write it as ed25519:<base64 of 32 bytes>, the line of the .pub file from `imagebuild config keygen`"},
		{"multi-line key", func(c *Config) { c.Admin.SSHAuthorizedKeys = []string{testKey + "\n" + testKey} },
			"$.admin.sshAuthorizedKeys[0]: a key must be a single line; put each key in its own list item"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.want != "" && err == nil:
				t.Errorf("Validate succeeded, want:\n%s", tt.want)
			case tt.want != "" && err.Error() != tt.want:
				t.Errorf("Validate:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
}

func TestIgnitionMustBeJSON(t *testing.T) {
	base := "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n1\n"
	c, err := Parse("machine.yaml", []byte(base+"ignition: |\n  {\"ignition\": {\"version\": \"3.4.0\"}}\n"))
	require.NoError(t, err)
	assert.JSONEq(t, `{"ignition": {"version": "3.4.0"}}`, c.Ignition)
	_, err = Parse("machine.yaml", []byte(base+"ignition: not json\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "machine.yaml: $.ignition: is not a JSON object")
}
