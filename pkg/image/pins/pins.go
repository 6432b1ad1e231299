// Package pins keeps the components' pins in one place: it reads
// components/versions.yaml, aligns each component's go.mod with it, checks
// that etcd, CoreDNS and pause are what the pinned kubeadm expects, and
// renders the Kubernetes bundle with the digests its images build to.
package pins

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

const (
	// VersionsFile is the pins, in the components directory.
	VersionsFile = "versions.yaml"
	// BundleTemplate renders the Kubernetes bundle, in the components directory.
	BundleTemplate = "kubernetes-bundle.tmpl"

	apiVersion = "terrarium.dev/v1alpha1"
	kind       = "ComponentVersions"
)

// Versions is components/versions.yaml.
type Versions struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// SourceDateEpoch is the build date (Unix seconds) of every image the
	// Kubernetes bundle builds.
	SourceDateEpoch int64  `yaml:"sourceDateEpoch"`
	Kubernetes      string `yaml:"kubernetes"`
	Etcd            string `yaml:"etcd"`
	CoreDNS         string `yaml:"coredns"`
	Pause           string `yaml:"pause"`
	Containerd      string `yaml:"containerd"`
	Runc            string `yaml:"runc"`
	CNIPlugins      string `yaml:"cniPlugins"`
	Flannel         string `yaml:"flannel"`
	// KubeNetworkPolicies is SIG Network's NetworkPolicy controller
	// (sigs.k8s.io/kube-network-policies), which every node runs.
	KubeNetworkPolicies string `yaml:"kubeNetworkPolicies"`
	// LocalPathProvisioner is the default StorageClass's provisioner
	// (github.com/rancher/local-path-provisioner).
	LocalPathProvisioner string `yaml:"localPathProvisioner"`
	// MetricsServer is the resource metrics API (sigs.k8s.io/metrics-server).
	MetricsServer string `yaml:"metricsServer"`
	// MetalLB gives Services of type LoadBalancer addresses on the
	// plant network (go.universe.tf/metallb).
	MetalLB string `yaml:"metallb"`
}

// Load reads and checks the pins in dir (the components directory).
func Load(dir string) (*Versions, error) {
	p := filepath.Join(dir, VersionsFile)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read component versions: %w", err)
	}
	var v Versions
	if err := strictyaml.Unmarshal(data, &v); err != nil {
		if ps, ok := errors.AsType[strictyaml.Problems](err); ok {
			return nil, ps.WithLines(data).WithFile(p)
		}
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var ps strictyaml.Problems
	if v.APIVersion != apiVersion {
		ps.Addf(strictyaml.Root().Field("apiVersion"), "is %q; want %q", v.APIVersion, apiVersion)
	}
	if v.Kind != kind {
		ps.Addf(strictyaml.Root().Field("kind"), "is %q; want %q", v.Kind, kind)
	}
	for _, f := range []struct{ name, v string }{
		{"kubernetes", v.Kubernetes}, {"etcd", v.Etcd}, {"coredns", v.CoreDNS},
		{"containerd", v.Containerd}, {"runc", v.Runc}, {"cniPlugins", v.CNIPlugins}, {"flannel", v.Flannel},
		{"kubeNetworkPolicies", v.KubeNetworkPolicies}, {"localPathProvisioner", v.LocalPathProvisioner},
		{"metricsServer", v.MetricsServer}, {"metallb", v.MetalLB},
	} {
		if !isSemver(f.v) {
			ps.Addf(strictyaml.Root().Field(f.name), "%q is not a version like v1.2.3", f.v)
		}
	}
	if v.SourceDateEpoch <= 0 {
		ps.Addf(strictyaml.Root().Field("sourceDateEpoch"), "is required: the Unix time stamped into every built image")
	}
	if v.Pause == "" || strings.HasPrefix(v.Pause, "v") {
		ps.Addf(strictyaml.Root().Field("pause"), "%q is not pause's image tag (e.g. \"3.10.2\", no v)", v.Pause)
	}
	if len(ps) > 0 {
		return nil, ps.WithLines(data).WithFile(p)
	}
	return &v, nil
}

func isSemver(s string) bool {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if !strings.HasPrefix(s, "v") || len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// StagingVersion is the version of Kubernetes' staging modules (k8s.io/api,
// k8s.io/client-go, ...) that matches a release: v1.36.3 → v0.36.3.
func (v *Versions) StagingVersion() string {
	return "v0." + strings.SplitN(strings.TrimPrefix(v.Kubernetes, "v"), ".", 2)[1]
}

// EtcdTag is etcd's image tag as kubeadm names it: v3.6.8 → 3.6.8-0.
func (v *Versions) EtcdTag() string { return strings.TrimPrefix(v.Etcd, "v") + "-0" }

// Image is one image of the Kubernetes bundle and how it is built.
type Image struct {
	Name      string
	Component string
	Programs  []string
	BinDir    string
	// Debian lists the packages of the image's userland layer, if any.
	Debian []string
}

// Images lists the Kubernetes bundle's images.
func (v *Versions) Images() []Image {
	k := func(name string) Image {
		return Image{Name: "registry.k8s.io/" + name + ":" + v.Kubernetes, Component: "kubernetes", Programs: []string{name}}
	}
	proxy := k("kube-proxy")
	proxy.Debian = []string{"iptables", "nftables", "conntrack"}
	return []Image{
		k("kube-apiserver"),
		k("kube-controller-manager"),
		k("kube-scheduler"),
		proxy,
		{Name: "registry.k8s.io/etcd:" + v.EtcdTag(), Component: "etcd", Programs: []string{"etcd", "etcdctl"}},
		{Name: "registry.k8s.io/coredns/coredns:" + v.CoreDNS, Component: "coredns", Programs: []string{"coredns"}, BinDir: "/"},
		{Name: "registry.k8s.io/pause:" + v.Pause, Component: "pause", Programs: []string{"pause"}, BinDir: "/"},
		{Name: "docker.io/flannel/flannel:" + v.Flannel, Component: "flannel", Programs: []string{"flanneld"},
			BinDir: "/opt/bin", Debian: []string{"iptables", "nftables", "busybox-static"}},
		// /bin/netpol, as in upstream's image: it programs nftables over
		// netlink and needs no userland.
		{Name: "registry.k8s.io/networking/kube-network-policies:" + v.KubeNetworkPolicies, Component: "kube-network-policies",
			Programs: []string{"netpol"}, BinDir: "/bin"},
		// The provisioner and its volume helper (ours), which its helper
		// pods run from the same image: no shell, no busybox image.
		{Name: "docker.io/rancher/local-path-provisioner:" + v.LocalPathProvisioner, Component: "local-path-provisioner",
			Programs: []string{"local-path-provisioner", "local-path-volume"}, BinDir: "/usr/bin"},
		{Name: "registry.k8s.io/metrics-server/metrics-server:" + v.MetricsServer, Component: "metrics-server",
			Programs: []string{"metrics-server"}, BinDir: "/"},
		// MetalLB's two images, as upstream's; the speaker's carries
		// metallb-link (ours), its init container.
		{Name: "quay.io/metallb/controller:" + v.MetalLB, Component: "metallb", Programs: []string{"controller"}, BinDir: "/"},
		{Name: "quay.io/metallb/speaker:" + v.MetalLB, Component: "metallb", Programs: []string{"speaker", "metallb-link"}, BinDir: "/"},
	}
}

// BundleFile is the Kubernetes bundle's file name for these pins.
func (v *Versions) BundleFile() string { return "kubernetes-" + v.Kubernetes + ".yaml" }

// Pinned is what `make pin` learns by building the bundle: each image's
// digest and the exact Debian packages of its Debian layer, by image name.
// Missing entries are rendered unpinned.
type Pinned struct {
	Digests map[string]string
	Locks   map[string][]bundle.DebianPackage
}

// PinnedOf reads what a rendered bundle pins.
func PinnedOf(b *bundle.Bundle) Pinned {
	p := Pinned{Digests: map[string]string{}, Locks: map[string][]bundle.DebianPackage{}}
	for _, img := range b.Images {
		if img.Source.Digest != "" {
			p.Digests[img.Name] = img.Source.Digest
		}
		if bs := img.Source.Build; bs != nil && bs.Debian != nil && len(bs.Debian.Lock) > 0 {
			p.Locks[img.Name] = bs.Debian.Lock
		}
	}
	return p
}

// RenderBundle renders the bundle template in dir (the components
// directory) with these pins and what building the images pinned, for a
// bundle file in bundlesDir: it names the components relative to it.
func (v *Versions) RenderBundle(dir, bundlesDir string, pinned Pinned) ([]byte, error) {
	rel, err := relDir(bundlesDir, dir)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, BundleTemplate)
	text, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read bundle template: %w", err)
	}
	t, err := template.New(BundleTemplate).Funcs(template.FuncMap{"join": strings.Join}).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	data := struct {
		*Versions
		// Components is the components directory seen from the bundle.
		Components string
		Images     []Image
		Digest     func(string) string
		Lock       func(string) []bundle.DebianPackage
	}{v, rel, v.Images(), func(name string) string { return pinned.Digests[name] },
		func(name string) []bundle.DebianPackage { return pinned.Locks[name] }}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return b.Bytes(), nil
}

// relDir is dir as a slash path relative to from.
func relDir(from, dir string) (string, error) {
	af, err := filepath.Abs(from)
	if err != nil {
		return "", err
	}
	ad, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(af, ad)
	if err != nil {
		return "", fmt.Errorf("components %s seen from bundles %s: %w", dir, from, err)
	}
	return filepath.ToSlash(rel), nil
}
