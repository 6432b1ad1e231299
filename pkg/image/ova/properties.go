package ova

// The vApp properties the OVA declares: the keys the node's vmware config
// source reads from the OVF environment (pkg/node/config/configsource/vmware,
// docs/operations/vsphere.md). vSphere's Deploy OVF Template wizard asks
// for them under their categories.
const (
	PropConfig   = "terrarium.config"
	PropHostname = "terrarium.hostname"
	PropAddress  = "terrarium.address"
	PropGateway  = "terrarium.gateway"
	PropDNS      = "terrarium.dns"
	PropSSHKey   = "terrarium.ssh-key"
)

func product(o options) productSection {
	prop := func(key, label, description string) property {
		return property{Key: key, Type: "string", UserConfigurable: true, Label: label, Description: description}
	}
	return productSection{
		Required:    "false",
		Info:        "Settings the node reads at its first boot",
		Product:     "Terrarium",
		Version:     o.version,
		FullVersion: o.version,
		Entries: []productEntry{
			category{Text: "Machine config"},
			prop(PropConfig, "Machine config (base64)",
				"The whole machine.yaml of the node, base64-encoded (base64 -w0 machine.yaml). When set, the settings below are ignored."),
			category{Text: "Network and access (when no machine config is set)"},
			prop(PropHostname, "Hostname", "The hostname of the node, e.g. node-1."),
			prop(PropAddress, "Static address (CIDR)",
				"Address and prefix length on every en* interface, e.g. 10.0.0.11/24; several separated by commas. Empty: DHCP."),
			prop(PropGateway, "Gateway", "The default gateway, inside the subnet of the address, e.g. 10.0.0.1."),
			prop(PropDNS, "DNS servers", "Name servers separated by commas, e.g. 10.0.0.1, 9.9.9.9."),
			prop(PropSSHKey, "SSH public key", "One authorized_keys line for the admin user, e.g. ssh-ed25519 AAAA... alice@laptop."),
		},
	}
}
