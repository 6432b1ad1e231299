package cloudinit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

const (
	key1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINFlyNUTsqromdXvFiJRi1uspgjtFPy0KJbZAqe9/rP3 k1@example"
	key2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID8J7mZi/gxjEEiB1HOIW6PjKWViSnUIzTKLux/S7KGe k2@example"
	key3 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINhzLEqT1lUJoMZs/EnJyNPXX8/T9Y8/h0hGSs3cmPKy k3@example"

	machineYAML = "# signed by ops\napiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-7\n" +
		"network:\n  interfaces:\n    - name: en*\n      dhcp: true\n"
)

// config is the machine config a test expects, with DHCP on en* unless
// it says otherwise.
func config(hostname string, admin *machineconfig.Admin) *machineconfig.Config {
	return &machineconfig.Config{
		APIVersion: machineconfig.APIVersion,
		Kind:       machineconfig.Kind,
		Hostname:   hostname,
		Network:    DefaultNetwork(),
		Admin:      admin,
	}
}

func TestMachineConfig(t *testing.T) {
	static := machineconfig.Network{Interfaces: []machineconfig.Interface{
		{MACAddress: "52:54:00:12:34:56", Addresses: []string{"10.0.0.5/24"}, Gateway: "10.0.0.1", DNS: []string{"10.0.0.2"}},
	}}
	withStatic := config("web", nil)
	withStatic.Network = static
	for _, tc := range []struct {
		name string
		in   Input
		want *machineconfig.Config
	}{
		{
			name: "cloud-config mapped",
			in: Input{
				UserData: []byte("#cloud-config\nhostname: web\nusers:\n  - default\n  - name: bob\n" +
					"  - name: alice\n    ssh_authorized_keys:\n      - " + key1 + "\nssh_authorized_keys: [\"" + key2 + "\"]\n"),
				MetaData: MetaData{InstanceID: "i-1", LocalHostname: "other", PublicKeys: []string{key3, key1}},
			},
			want: config("web", &machineconfig.Admin{Name: "alice", SSHAuthorizedKeys: []string{key1, key2, key3}}),
		},
		{
			name: "fqdn gives its first label",
			in:   Input{UserData: []byte("#cloud-config\r\nfqdn: web.example.com\n")},
			want: config("web", nil),
		},
		{
			name: "hostname wins over fqdn and is cut at the first dot",
			in:   Input{UserData: []byte("#cloud-config\nfqdn: a.example.com\nhostname: web.example.com\n")},
			want: config("web", nil),
		},
		{
			name: "meta-data hostname when user-data has none",
			in:   Input{UserData: []byte("#cloud-config\nusers: [bob]\nssh_authorized_keys: [\"" + key1 + "\"]\n"), MetaData: MetaData{LocalHostname: "Web.novalocal"}},
			want: config("web", &machineconfig.Admin{Name: "bob", SSHAuthorizedKeys: []string{key1}}),
		},
		{
			name: "empty user-data: meta-data alone",
			in:   Input{MetaData: MetaData{LocalHostname: "web", PublicKeys: []string{key1}}},
			want: config("web", &machineconfig.Admin{Name: "admin", SSHAuthorizedKeys: []string{key1}}),
		},
		{
			name: "empty cloud-config",
			in:   Input{UserData: []byte("#cloud-config\n"), MetaData: MetaData{LocalHostname: "web"}},
			want: config("web", nil),
		},
		{
			name: "the data source's network",
			in:   Input{UserData: []byte("  \n"), MetaData: MetaData{LocalHostname: "web"}, Network: static},
			want: withStatic,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := MachineConfig(tc.in)
			require.NoError(t, err)
			assert.False(t, res.Verbatim)
			got, err := machineconfig.Parse("result", res.Config)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			want, err := tc.want.Marshal()
			require.NoError(t, err)
			assert.Equal(t, string(want), string(res.Config), "the canonical form")
		})
	}
}

func TestMachineConfigVerbatim(t *testing.T) {
	in := Input{UserData: []byte(machineYAML), MetaData: MetaData{LocalHostname: "ignored", PublicKeys: []string{key1}}}
	in.Network = machineconfig.Network{Interfaces: []machineconfig.Interface{{Name: "eth0", DHCP: true}}}
	assert.True(t, IsMachineConfig(in.UserData))
	res, err := MachineConfig(in)
	require.NoError(t, err)
	assert.True(t, res.Verbatim)
	assert.Equal(t, machineYAML, string(res.Config), "byte for byte, so its signature applies")
}

func TestMachineConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       Input
		sentinel error
		want     []string
	}{
		{
			name:     "unsupported keys, named",
			in:       Input{UserData: []byte("#cloud-config\nhostname: a\nruncmd: [ls]\npackages: [vim]\nusers:\n  - name: x\n    sudo: ALL\n")},
			sentinel: ErrUnsupported,
			want: []string{"cloud-config: runcmd, packages, users[0].sudo: not supported by Terrarium " +
				"(it takes hostname, fqdn, users[].name, users[].ssh_authorized_keys, ssh_authorized_keys); " +
				"put the rest in a Terrarium machine config"},
		},
		{
			name: "a second user with keys",
			in: Input{UserData: []byte("#cloud-config\nhostname: a\nusers:\n  - {name: alice, ssh_authorized_keys: [\"" + key1 +
				"\"]}\n  - {name: bob, ssh_authorized_keys: [\"" + key2 + "\"]}\n")},
			sentinel: ErrUnsupported,
			want:     []string{"users[1] (bob) has keys, but users[0] (alice) already does", "one admin user"},
		},
		{
			name:     "not YAML",
			in:       Input{UserData: []byte("#cloud-config\nhostname: [a\n")},
			sentinel: ErrMalformed,
			want:     []string{"cloud-config is malformed"},
		},
		{
			name:     "wrong types, with lines",
			in:       Input{UserData: []byte("#cloud-config\nhostname: {a: b}\nusers: alice\n")},
			sentinel: ErrMalformed,
			want:     []string{"hostname: must be a single value (line 2); users: must be a list (line 3)"},
		},
		{
			name:     "malformed and unsupported together",
			in:       Input{UserData: []byte("#cloud-config\nusers: alice\nbootcmd: [x]\n")},
			sentinel: ErrUnsupported,
			want:     []string{"users: must be a list (line 2)", "cloud-config: bootcmd: not supported"},
		},
		{
			name:     "a user without a name",
			in:       Input{UserData: []byte("#cloud-config\nusers:\n  - ssh_authorized_keys: []\n")},
			sentinel: ErrMalformed,
			want:     []string{"users[0]: has no name (line 3)"},
		},
		{
			name:     "YAML aliases",
			in:       Input{UserData: []byte("#cloud-config\nhostname: &h a\nfqdn: *h\n")},
			sentinel: ErrMalformed,
			want:     []string{"fqdn: YAML aliases (*h) are not supported"},
		},
		{
			name:     "a repeated key",
			in:       Input{UserData: []byte("#cloud-config\nhostname: a\nhostname: b\n")},
			sentinel: ErrMalformed,
			want:     []string{"hostname: repeated"},
		},
		{
			name:     "a shell script",
			in:       Input{UserData: []byte("#!/bin/sh\necho hi\n")},
			sentinel: ErrUnsupported,
			want:     []string{"user-data is a script"},
		},
		{
			name:     "YAML without the header",
			in:       Input{UserData: []byte("hostname: a\n")},
			sentinel: ErrUnsupported,
			want:     []string{"neither a Terrarium machine config", "which starts with the line #cloud-config"},
		},
		{
			name:     "no hostname anywhere",
			in:       Input{UserData: []byte("#cloud-config\nssh_authorized_keys: [\"" + key1 + "\"]\n")},
			sentinel: ErrNoHostname,
			want:     []string{"local-hostname in the meta-data"},
		},
		{
			name: "the schema's rules apply, without lines of the made-up document",
			in:   Input{UserData: []byte("#cloud-config\nhostname: Bad_Host\nusers: [root]\n")},
			want: []string{"machine config made from the cloud-init data: $.hostname:", "$.admin.name:", "$.admin.sshAuthorizedKeys: at least one key"},
		},
		{
			name: "a machine config is checked too",
			in:   Input{UserData: []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\n")},
			want: []string{"user-data: $.hostname: required"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MachineConfig(tc.in)
			require.Error(t, err)
			if tc.sentinel != nil {
				assert.ErrorIs(t, err, tc.sentinel)
			}
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "(line 0)")
			if tc.sentinel == nil {
				assert.NotContains(t, err.Error(), "(line", "lines of the built document")
			}
		})
	}
}

func TestIsMachineConfig(t *testing.T) {
	for in, want := range map[string]bool{
		machineYAML:                            true,
		"kind: MachineConfig\n":                true,
		"#cloud-config\napiVersion: x\n":       false,
		"":                                     false,
		"- apiVersion\n":                       false,
		"[":                                    false,
		"apiVersion: terrarium.dev/v1alpha9\n": true,
	} {
		assert.Equal(t, want, IsMachineConfig([]byte(in)), "%q", in)
	}
}

func TestUniqueKeys(t *testing.T) {
	got := uniqueKeys([]string{key1, " ", key1 + " other-comment", key2, "junk"})
	assert.Equal(t, []string{key1, key2, "junk"}, got)
}
