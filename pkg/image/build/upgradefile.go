package build

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/image/sbom"
)

// UpgradeFileName is the name of the upgrade file a build of version
// writes.
func UpgradeFileName(name, version string) string {
	return fmt.Sprintf("%s-%s.upgrade", name, version)
}

// upgradeInputs are what the upgrade file stage reads.
type upgradeInputs struct {
	name, version, minFrom string
	builtAt                string // upgrade.BuiltAtLayout
	rootfs, kernel, initrd string // files
	sbom                   string // the build's SBOM (optional)
	// ukis are a Secure Boot build's signed UKIs, one per slot (both or
	// none).
	ukis   map[layout.Slot]string
	images []string // the names of the slot bundle's images
	key    string   // the signing key file
}

// writeUpgradeFile writes the signed upgrade file of a build to dst, whole
// or not at all, and returns its manifest.
func writeUpgradeFile(ctx context.Context, in upgradeInputs, dst string) (upgrade.Manifest, error) {
	key, err := signature.LoadPrivateKey(in.key)
	if err != nil {
		return upgrade.Manifest{}, fmt.Errorf("upgrade.signingKey: %w", err)
	}
	kube, etcd := bundleVersions(in.images)
	minFrom := in.minFrom
	if minFrom == "" {
		minFrom = "0.0.0"
	}
	m := upgrade.Manifest{
		FormatVersion: upgrade.FormatVersion, Version: in.version, Compatible: in.name, MinFromVersion: minFrom,
		KubernetesVersion: kube, EtcdVersion: etcd, BuiltAt: in.builtAt,
	}
	parts := []upgrade.Part{
		upgrade.FilePart("rootfs.squashfs", upgrade.RoleRootfs, in.rootfs),
		upgrade.FilePart("vmlinuz", upgrade.RoleKernel, in.kernel),
		upgrade.FilePart("initrd.img", upgrade.RoleInitramfs, in.initrd),
	}
	if in.sbom != "" {
		parts = append(parts, upgrade.FilePart(sbom.FileName, upgrade.RoleSBOM, in.sbom))
	}
	for _, slot := range layout.Slots() {
		if uki, ok := in.ukis[slot]; ok {
			parts = append(parts, upgrade.FilePart("terrarium-"+string(slot)+".efi", upgrade.UKIRole(string(slot)), uki))
		}
	}
	var out upgrade.Manifest
	err = atomicfile.Write(dst, 0o644, func(w io.Writer) error {
		var werr error
		out, werr = upgrade.Write(ctx, w, m, parts, key)
		return werr
	})
	if err != nil {
		return upgrade.Manifest{}, fmt.Errorf("write the upgrade file %s: %w", dst, err)
	}
	return out, nil
}

// etcdTag is etcd's image tag: a version and kubeadm's build suffix.
var etcdTag = regexp.MustCompile(`^v?(\d+\.\d+\.\d+)(-\d+)?$`)

// bundleVersions are the Kubernetes and etcd versions a slot's bundle
// carries (the tags of its kube-apiserver and etcd images, by name);
// empty for a bundle without them.
func bundleVersions(images []string) (kube, etcd string) {
	for _, name := range images {
		if v, ok := strings.CutPrefix(name, "registry.k8s.io/kube-apiserver:"); ok {
			kube = v
		}
		if v, ok := strings.CutPrefix(name, "registry.k8s.io/etcd:"); ok {
			if m := etcdTag.FindStringSubmatch(v); m != nil {
				etcd = m[1]
			}
		}
	}
	return kube, etcd
}
