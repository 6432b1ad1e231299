package ignitionspec

import (
	"net/url"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// refuseSections names every section of the config Terrarium does not
// apply. ignition.timeouts is taken and ignored: it only bounds fetches,
// and Terrarium fetches nothing.
func (m *mapper) refuseSections(in types.Config) {
	ig := in.Ignition
	if len(ig.Config.Merge) > 0 {
		m.unsupported("$.ignition.config.merge", "Terrarium does not merge configs%s; merge them before (Butane's ignition.config.merge with local files) and give one config",
			remoteNote(ig.Config.Merge...))
	}
	if ig.Config.Replace.Source != nil {
		m.unsupported("$.ignition.config.replace", "Terrarium does not replace a config with another%s; give the other config itself",
			remoteNote(ig.Config.Replace))
	}
	if len(ig.Security.TLS.CertificateAuthorities) > 0 {
		m.unsupported("$.ignition.security.tls.certificateAuthorities", "Terrarium fetches nothing (the node is air-gapped), so it needs no certificate authority for it; remove it")
	}
	if p := ig.Proxy; p.HTTPProxy != nil || p.HTTPSProxy != nil || len(p.NoProxy) > 0 {
		m.unsupported("$.ignition.proxy", "Terrarium fetches nothing (the node is air-gapped); remove it")
	}
	if k := in.KernelArguments; len(k.ShouldExist) > 0 || len(k.ShouldNotExist) > 0 {
		m.unsupported("$.kernelArguments", "the kernel command line is part of the signed slot; set it in the build spec")
	}
	s := in.Storage
	if len(s.Disks) > 0 {
		m.unsupported("$.storage.disks", "Terrarium does not partition disks; use the build spec")
	}
	if len(s.Raid) > 0 {
		m.unsupported("$.storage.raid", "Terrarium does not assemble RAID arrays; the disk layout is the build spec's")
	}
	if len(s.Filesystems) > 0 {
		m.unsupported("$.storage.filesystems", "Terrarium does not make or mount file systems from a config; the disk layout is the build spec's "+
			"(a .mount unit in systemd.units can mount one that exists)")
	}
	if len(s.Luks) > 0 {
		m.unsupported("$.storage.luks", "Terrarium does not set up LUKS volumes; the disk layout is the build spec's")
	}
}

// remoteNote says, for an error, that resources are remote, if any is.
func remoteNote(rs ...types.Resource) string {
	for _, r := range rs {
		if r.Source != nil && sourceScheme(*r.Source) != "data" {
			return " and fetches nothing (the node is air-gapped)"
		}
	}
	return ""
}

// sourceScheme is the scheme of a resource's URL, in lower case.
func sourceScheme(source string) string {
	u, err := url.Parse(source)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme)
}
