package vmware

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

func TestParseOVFEnv(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		want    map[string]string
		wantErr error
		says    string
	}{
		{
			name: "vSphere's document",
			doc:  ovfEnv(PropHostname, "node-1", "other.key", "a & b <c>", PropSSHKey, sshKey),
			want: map[string]string{PropHostname: "node-1", "other.key": "a & b <c>", PropSSHKey: sshKey},
		},
		{
			name: "no properties",
			doc:  ovfEnv(),
			want: map[string]string{},
		},
		{
			name: "several property sections, empty values, unprefixed attributes",
			doc: `<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1">
<PropertySection><Property oe:key="a" oe:value="1"/><Property oe:key="b"/></PropertySection>
<PropertySection><Property key="c" value="3"></Property></PropertySection></Environment>`,
			want: map[string]string{"a": "1", "b": "", "c": "3"},
		},
		{
			name: "no namespace at all",
			doc:  `<Environment><PropertySection><Property key="a" value="1"/></PropertySection></Environment>`,
			want: map[string]string{"a": "1"},
		},
		{
			name: "another VM's properties in an Entity are not ours",
			doc: `<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1">
<PropertySection><Property oe:key="a" oe:value="mine"/></PropertySection>
<Entity oe:id="db"><PropertySection><Property oe:key="a" oe:value="theirs"/><Property oe:key="z" oe:value="theirs"/></PropertySection></Entity>
</Environment>`,
			want: map[string]string{"a": "mine"},
		},
		{
			name: "attributes of another namespace are not the key",
			doc: `<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:x="urn:x">
<PropertySection><Property x:key="evil" key="a" value="1" x:value="evil"/></PropertySection></Environment>`,
			want: map[string]string{"a": "1"},
		},
		{name: "not XML", doc: `{"hostname": "x"}`, wantErr: ErrBadOVFEnv},
		{name: "empty", doc: ``, wantErr: ErrBadOVFEnv, says: "no <Environment>"},
		{name: "unclosed", doc: `<Environment><PropertySection>`, wantErr: ErrBadOVFEnv},
		{name: "another root", doc: `<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1"/>`, wantErr: ErrBadOVFEnv, says: "<Envelope>"},
		{name: "Environment of another namespace", doc: `<Environment xmlns="urn:other"/>`, wantErr: ErrBadOVFEnv},
		{name: "two roots", doc: `<Environment/><Environment/>`, wantErr: ErrBadOVFEnv, says: "more than one root"},
		{
			name:    "a key twice",
			doc:     ovfEnv(PropHostname, "a", PropHostname, "b"),
			wantErr: ErrBadOVFEnv, says: `"terrarium.hostname" is set twice`,
		},
		{
			name:    "a property without key",
			doc:     `<Environment><PropertySection><Property value="1"/></PropertySection></Environment>`,
			wantErr: ErrBadOVFEnv, says: "no oe:key",
		},
		{
			name: "entity expansion (billion laughs)",
			doc: `<?xml version="1.0"?><!DOCTYPE Environment [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>
<Environment><PropertySection><Property key="terrarium.hostname" value="&b;"/></PropertySection></Environment>`,
			wantErr: ErrBadOVFEnv, says: "DOCTYPE",
		},
		{
			name: "external entity",
			doc: `<?xml version="1.0"?><!DOCTYPE Environment [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<Environment><PropertySection><Property key="terrarium.ssh-key" value="&x;"/></PropertySection></Environment>`,
			wantErr: ErrBadOVFEnv, says: "DOCTYPE",
		},
		{
			name:    "an entity reference without DOCTYPE",
			doc:     `<Environment><PropertySection><Property key="a" value="&x;"/></PropertySection></Environment>`,
			wantErr: ErrBadOVFEnv,
		},
		{
			name:    "not UTF-8",
			doc:     `<?xml version="1.0" encoding="ISO-8859-1"?><Environment/>`,
			wantErr: ErrBadOVFEnv,
		},
		{
			name:    "deeply nested",
			doc:     "<Environment>" + strings.Repeat("<a>", 100000) + strings.Repeat("</a>", 100000) + "</Environment>",
			wantErr: ErrBadOVFEnv, says: "nested more than 32 deep",
		},
		{
			name:    "too many properties",
			doc:     "<Environment><PropertySection>" + manyProperties(maxProperties+1) + "</PropertySection></Environment>",
			wantErr: ErrBadOVFEnv, says: "more than 1024 properties",
		},
		{
			name:    "huge",
			doc:     ovfEnv(PropHostname, strings.Repeat("a", MaxValueSize)),
			wantErr: ErrTooLarge,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOVFEnv([]byte(tt.doc))
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.says)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func manyProperties(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `<Property key="k%d" value=""/>`, i)
	}
	return b.String()
}

func TestFromProperties(t *testing.T) {
	const where = "guestinfo.ovfEnv"
	iface := func(i machineconfig.Interface) machineconfig.Network {
		return machineconfig.Network{Interfaces: []machineconfig.Interface{i}}
	}
	tests := []struct {
		name    string
		props   map[string]string
		want    *machineconfig.Config // parsed from Found.Config
		source  string
		sig     string
		wantErr error
		says    []string
	}{
		{
			name:   "hostname only: DHCP",
			props:  map[string]string{PropHostname: "node-1"},
			want:   &machineconfig.Config{Hostname: "node-1", Network: iface(machineconfig.Interface{Name: "en*", DHCP: true})},
			source: "VMware OVF environment (guestinfo.ovfEnv, terrarium.hostname)",
		},
		{
			name: "static, with gateway, DNS and admin",
			props: map[string]string{PropHostname: " node-2 ", PropAddress: "10.0.0.12/24", PropGateway: "10.0.0.1",
				PropDNS: "10.0.0.1, 9.9.9.9,", PropSSHKey: sshKey, "unrelated": "x"},
			want: &machineconfig.Config{Hostname: "node-2",
				Network: iface(machineconfig.Interface{Name: "en*", Addresses: []string{"10.0.0.12/24"}, Gateway: "10.0.0.1", DNS: []string{"10.0.0.1", "9.9.9.9"}}),
				Admin:   &machineconfig.Admin{Name: "admin", SSHAuthorizedKeys: []string{sshKey}}},
			source: "VMware OVF environment (guestinfo.ovfEnv, terrarium.hostname, terrarium.address, terrarium.gateway, terrarium.dns, terrarium.ssh-key)",
		},
		{
			name:  "two addresses",
			props: map[string]string{PropHostname: "node-3", PropAddress: "10.0.0.13/24,fd00::13/64"},
			want: &machineconfig.Config{Hostname: "node-3",
				Network: iface(machineconfig.Interface{Name: "en*", Addresses: []string{"10.0.0.13/24", "fd00::13/64"}})},
			source: "VMware OVF environment (guestinfo.ovfEnv, terrarium.hostname, terrarium.address)",
		},
		{
			name:   "terrarium.config wins",
			props:  map[string]string{PropConfig: b64(config), PropHostname: "ignored", PropSignature: b64("sig")},
			want:   &machineconfig.Config{Hostname: "node-1"},
			source: "VMware OVF environment (guestinfo.ovfEnv, terrarium.config)",
			sig:    "sig",
		},
		{
			name:   "terrarium.config gzip+base64",
			props:  map[string]string{PropConfig: gzb64(t, []byte(config)), PropEncoding: "gzip+base64"},
			want:   &machineconfig.Config{Hostname: "node-1"},
			source: "VMware OVF environment (guestinfo.ovfEnv, terrarium.config)",
		},
		{name: "terrarium.config bad base64", props: map[string]string{PropConfig: "!!"}, wantErr: ErrBadBase64, says: []string{where, PropConfig}},
		{name: "terrarium.config bad gzip", props: map[string]string{PropConfig: b64("x"), PropEncoding: "gz+b64"}, wantErr: ErrBadGzip},
		{name: "bad signature", props: map[string]string{PropConfig: b64(config), PropSignature: "!!"}, wantErr: ErrBadBase64, says: []string{PropSignature}},
		{name: "none", props: map[string]string{"other": "x"}, wantErr: configsource.ErrAbsent, says: []string{where, "sets none of terrarium.config"}},
		{name: "all empty", props: map[string]string{PropConfig: " ", PropHostname: ""}, wantErr: configsource.ErrAbsent},
		{
			name: "invalid hostname", props: map[string]string{PropHostname: "Node_1"},
			wantErr: ErrBadProperties, says: []string{where, "$.hostname", "terrarium.hostname → hostname"},
		},
		{
			name: "address without prefix", props: map[string]string{PropHostname: "n", PropAddress: "10.0.0.5"},
			wantErr: ErrBadProperties, says: []string{"has no prefix length", "terrarium.address → network.interfaces[0].addresses"},
		},
		{
			name: "gateway with DHCP", props: map[string]string{PropHostname: "n", PropGateway: "10.0.0.1"},
			wantErr: ErrBadProperties, says: []string{"$.network.interfaces[0].gateway"},
		},
		{
			name: "not an SSH key", props: map[string]string{PropHostname: "n", PropSSHKey: "hunter2"},
			wantErr: ErrBadProperties, says: []string{"$.admin.sshAuthorizedKeys[0]"},
		},
		{
			name: "no hostname", props: map[string]string{PropAddress: "10.0.0.5/24"},
			wantErr: ErrBadProperties, says: []string{"$.hostname"},
		},
		{
			name: "huge hostname", props: map[string]string{PropHostname: strings.Repeat("a", MaxConfigSize)},
			wantErr: ErrTooLarge,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found, err := FromProperties(tt.props, where)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				for _, s := range tt.says {
					assert.Contains(t, err.Error(), s)
				}
				assert.Nil(t, found)
				if !errors.Is(tt.wantErr, configsource.ErrAbsent) {
					assert.NotErrorIs(t, err, configsource.ErrAbsent)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.source, found.Source)
			if tt.sig == "" {
				assert.Nil(t, found.Signature)
			} else {
				assert.Equal(t, tt.sig, string(found.Signature))
			}
			got, err := machineconfig.Parse("found", found.Config)
			require.NoError(t, err)
			tt.want.APIVersion, tt.want.Kind = machineconfig.APIVersion, machineconfig.Kind
			assert.Equal(t, tt.want, got)
		})
	}
}

func FuzzOVFEnv(f *testing.F) {
	f.Add([]byte(ovfEnv(PropHostname, "node-1", PropAddress, "10.0.0.2/24", PropGateway, "10.0.0.1", PropDNS, "10.0.0.1", PropSSHKey, sshKey)))
	f.Add([]byte(ovfEnv(PropConfig, b64(config), PropSignature, b64("sig"))))
	f.Add([]byte(`<Environment><PropertySection><Property key="terrarium.hostname" value="x"/></PropertySection></Environment>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		props, err := ParseOVFEnv(data)
		if err != nil {
			if props != nil || (!errors.Is(err, ErrBadOVFEnv) && !errors.Is(err, ErrTooLarge)) {
				t.Fatalf("ParseOVFEnv: %v, %d properties", err, len(props))
			}
			return
		}
		if len(props) > maxProperties {
			t.Fatalf("%d properties, more than %d", len(props), maxProperties)
		}
		found, err := FromProperties(props, "fuzz")
		if err != nil {
			return
		}
		if len(found.Config) > MaxConfigSize || len(found.Signature) > MaxSignatureSize {
			t.Fatalf("config of %d bytes, signature of %d", len(found.Config), len(found.Signature))
		}
		if props[PropConfig] == "" {
			if _, err := machineconfig.Parse("fuzz", found.Config); err != nil {
				t.Fatalf("a config built from properties does not parse: %v", err)
			}
		}
	})
}
