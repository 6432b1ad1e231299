package pins

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
)

// repo is the repository root, two levels up from this package.
const repo = "../../.."

var componentsDir = filepath.Join(repo, "components")

func load(t *testing.T) *Versions {
	t.Helper()
	v, err := Load(componentsDir)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The committed components agree with the pins, and etcd, CoreDNS and
// pause are what the pinned kubeadm deploys.
func TestCommittedComponentsAgree(t *testing.T) {
	v := load(t)
	ctx := context.Background()
	if err := v.Check(ctx, componentsDir); err != nil {
		t.Fatal(err)
	}
	if err := v.CheckKubeadm(ctx); err != nil {
		t.Fatal(err)
	}
}

// The committed bundle is exactly what the template renders with the
// digests it pins: nobody edited it by hand, and every image is pinned.
func TestCommittedBundleIsRendered(t *testing.T) {
	v := load(t)
	path := filepath.Join(repo, "bundles", v.BundleFile())
	b, err := bundle.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range b.Images {
		if img.Source.Digest == "" {
			t.Errorf("%s: %s is not pinned; run make pin", path, img.Name)
		}
		if bs := img.Source.Build; bs != nil && bs.Debian != nil && len(bs.Debian.Lock) == 0 {
			t.Errorf("%s: %s's Debian layer is not locked; run make pin", path, img.Name)
		}
	}
	want, err := v.RenderBundle(componentsDir, filepath.Join(repo, "bundles"), PinnedOf(b))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s differs from what %s renders; run make pin", path, BundleTemplate)
	}
	var names []string
	for _, img := range v.Images() {
		names = append(names, img.Name)
	}
	for _, want := range []string{"registry.k8s.io/kube-apiserver:" + v.Kubernetes, "registry.k8s.io/etcd:" + v.EtcdTag(),
		"registry.k8s.io/coredns/coredns:" + v.CoreDNS, "registry.k8s.io/pause:" + v.Pause} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("the bundle lacks %s", want)
		}
	}
}

// containerd's sandbox image is the bundle's pause.
func TestContainerdSandboxIsPinnedPause(t *testing.T) {
	v := load(t)
	cfg, err := os.ReadFile(filepath.Join(repo, "os", "overlay", "etc", "containerd", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*sandbox\s*=\s*'([^']+)'`).FindSubmatch(cfg)
	if m == nil || string(m[1]) != "registry.k8s.io/pause:"+v.Pause {
		t.Fatalf("containerd's sandbox image is %q; want registry.k8s.io/pause:%s", m, v.Pause)
	}
}

// Check names every go.mod that drifted from the pins.
func TestCheckFindsDrift(t *testing.T) {
	v := load(t)
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-a", componentsDir+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copy components: %v: %s", err, out)
	}
	ctx := context.Background()
	if out, err := exec.Command("go", "mod", "edit", "-C", filepath.Join(dir, "coredns"), "-require=github.com/coredns/coredns@v1.14.3").CombinedOutput(); err != nil {
		t.Fatalf("go mod edit: %v: %s", err, out)
	}
	staging := "k8s.io/api=k8s.io/api@v0.35.0"
	if out, err := exec.Command("go", "mod", "edit", "-C", filepath.Join(dir, "kubernetes"), "-replace="+staging).CombinedOutput(); err != nil {
		t.Fatalf("go mod edit: %v: %s", err, out)
	}
	err := v.Check(ctx, dir)
	for _, want := range []string{
		filepath.Join(dir, "coredns", "go.mod") + " requires github.com/coredns/coredns v1.14.3; versions.yaml pins " + v.CoreDNS,
		filepath.Join(dir, "kubernetes", "go.mod") + " replaces k8s.io/api with v0.35.0; Kubernetes " + v.Kubernetes + " needs " + v.StagingVersion(),
		"run `make pin`",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check error = %v\nwant it to contain %q", err, want)
		}
	}
}

func TestCheckKubeadmFindsMismatch(t *testing.T) {
	v := load(t)
	v.Pause, v.Etcd = "3.9", "v3.5.0"
	err := v.CheckKubeadm(context.Background())
	for _, want := range []string{"pause: kubeadm " + v.Kubernetes + " expects", "pins 3.9", "etcd: kubeadm", "pins v3.5.0 (tag 3.5.0-0)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckKubeadm error = %v\nwant it to contain %q", err, want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, VersionsFile), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("apiVersion: terrarium.dev/v1alpha1\nkind: ComponentVersions\nsourceDateEpoch: 1\nkubernetes: 1.36\netcd: v3.6.8\ncoredns: v1.14.2\npause: v3.10\ncontainerd: v2.3.7\nrunc: v1.5.2\ncniPlugins: v1.9.1\nflannel: v0.28.10\n")
	_, err := Load(dir)
	for _, want := range []string{`$.kubernetes: "1.36" is not a version like v1.2.3 (line 4)`, `$.pause: "v3.10" is not pause's image tag`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load error = %v\nwant it to contain %q", err, want)
		}
	}
	write("apiVersion: terrarium.dev/v1alpha1\nkind: ComponentVersions\nkubernets: v1.36.3\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "$.kubernets") {
		t.Errorf("Load error = %v, want the unknown field named", err)
	}
}
