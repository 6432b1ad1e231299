package machineconfig

import (
	"path"
	"regexp"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// kernelLinkName matches the names the kernel gives links before udev
// renames them (eth0, wlan1): on an image that names links predictably
// they never exist once the node is up.
var kernelLinkName = regexp.MustCompile(`^(eth|wlan)[0-9]+$`)

// PredictableLinkNames reports whether an image booted with these kernel
// arguments names its links predictably (enp0s3, ens192): systemd's
// default, unless net.ifnames=0 turns it off.
func PredictableLinkNames(kernelCmdline string) bool {
	predictable := true
	for _, f := range strings.Fields(kernelCmdline) {
		if v, ok := strings.CutPrefix(f, "net.ifnames="); ok {
			predictable = v != "0"
		}
	}
	return predictable
}

// CheckLinkNaming checks the config's interface names against the naming
// scheme of the slot it lands on (its kernel command line): a name that can
// never match a link there would leave the node without its network, so it
// is a validation error with the fix, not a node that comes up unreachable.
func CheckLinkNaming(c *Config, kernelCmdline string) error {
	if !PredictableLinkNames(kernelCmdline) {
		return nil
	}
	var ps strictyaml.Problems
	for i, ifc := range c.Network.Interfaces {
		if ifc.Name == "" {
			continue
		}
		if kernelLinkName.MatchString(ifc.Name) || matchesOnlyKernelNames(ifc.Name) {
			ps.Addf(strictyaml.Root().Field("network").Field("interfaces").Index(i).Field("name"),
				"%q is a kernel link name, but this image names links predictably (like enp0s3 or ens192), so it matches no link; "+
					"choose the link by macAddress, or by a name like en*, or boot an image with net.ifnames=0 in kernel.cmdline", ifc.Name)
		}
	}
	return ps.Err()
}

// matchesOnlyKernelNames: a glob like eth* or eth[0-3] that matches kernel
// names and no predictable one.
func matchesOnlyKernelNames(glob string) bool {
	if !strings.ContainsAny(glob, `*?[\`) {
		return false
	}
	kernel := false
	for _, n := range []string{"eth0", "eth1", "eth9", "wlan0"} {
		if ok, _ := path.Match(glob, n); ok {
			kernel = true
		}
	}
	for _, n := range []string{"enp0s3", "ens192", "eno1", "enx525400123456", "wlp2s0", "enP1p0s1"} {
		if ok, _ := path.Match(glob, n); ok {
			return false
		}
	}
	return kernel
}
