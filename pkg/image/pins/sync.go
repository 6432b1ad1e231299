package pins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Requirement is a module a component's go.mod must require at a version.
type Requirement struct {
	Component, Module, Version string
}

// Requirements lists what each component's go.mod must require.
func (v *Versions) Requirements() []Requirement {
	var rs []Requirement
	add := func(comp, version string, mods ...string) {
		for _, m := range mods {
			rs = append(rs, Requirement{comp, m, version})
		}
	}
	add("kubernetes", v.Kubernetes, "k8s.io/kubernetes")
	add("etcd", v.Etcd, "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/etcdctl/v3", "go.etcd.io/etcd/api/v3",
		"go.etcd.io/etcd/client/pkg/v3", "go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/pkg/v3")
	add("coredns", v.CoreDNS, "github.com/coredns/coredns")
	add("containerd", v.Containerd, "github.com/containerd/containerd/v2")
	add("runc", v.Runc, "github.com/opencontainers/runc")
	add("cni-plugins", v.CNIPlugins, "github.com/containernetworking/plugins")
	add("flannel", v.Flannel, "github.com/flannel-io/flannel")
	add("kube-network-policies", v.KubeNetworkPolicies, "sigs.k8s.io/kube-network-policies")
	add("local-path-provisioner", v.LocalPathProvisioner, "github.com/rancher/local-path-provisioner")
	add("metrics-server", v.MetricsServer, "sigs.k8s.io/metrics-server")
	add("metallb", v.MetalLB, "go.universe.tf/metallb")
	return rs
}

// goMod is what `go mod edit -json` says about a go.mod.
type goMod struct {
	Require []struct{ Path, Version string }
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path, Version string }
	}
}

func readGoMod(ctx context.Context, dir string) (*goMod, error) {
	out, err := goCmd(ctx, dir, "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("%s/go.mod: %w", dir, err)
	}
	return &m, nil
}

// Check reports every way the components' go.mod files disagree with the
// pins, without touching the network.
func (v *Versions) Check(ctx context.Context, dir string) error {
	var problems []string
	mods := map[string]*goMod{}
	for _, r := range v.Requirements() {
		m, ok := mods[r.Component]
		if !ok {
			var err error
			if m, err = readGoMod(ctx, filepath.Join(dir, r.Component)); err != nil {
				return err
			}
			mods[r.Component] = m
		}
		got := ""
		for _, q := range m.Require {
			if q.Path == r.Module {
				got = q.Version
			}
		}
		if got != r.Version {
			problems = append(problems, fmt.Sprintf("%s requires %s %s; %s pins %s", filepath.Join(dir, r.Component, "go.mod"), r.Module, orNone(got), VersionsFile, r.Version))
		}
	}
	staging := v.StagingVersion()
	for _, r := range mods["kubernetes"].Replace {
		if strings.HasPrefix(r.Old.Path, "k8s.io/") && r.New.Version != staging {
			problems = append(problems, fmt.Sprintf("%s replaces %s with %s; Kubernetes %s needs %s", filepath.Join(dir, "kubernetes", "go.mod"), r.Old.Path, orNone(r.New.Version), v.Kubernetes, staging))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("components are not aligned with %s (run `make pin`, or `imagebuild components pin --components %s`):\n  %s",
			filepath.Join(dir, VersionsFile), dir, strings.Join(problems, "\n  "))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(nothing)"
	}
	return s
}

// Sync rewrites each component's go.mod to the pins (for Kubernetes also
// the replacements of its staging modules) and runs `go mod tidy`, which
// fetches through the module proxy.
func (v *Versions) Sync(ctx context.Context, dir string) error {
	byComp := map[string][]string{}
	for _, r := range v.Requirements() {
		byComp[r.Component] = append(byComp[r.Component], "-require="+r.Module+"@"+r.Version)
	}
	staging, err := v.stagingModules(ctx)
	if err != nil {
		return err
	}
	for _, m := range staging {
		byComp["kubernetes"] = append(byComp["kubernetes"], "-replace="+m+"="+m+"@"+v.StagingVersion())
	}
	comps := make([]string, 0, len(byComp))
	for c := range byComp {
		comps = append(comps, c)
	}
	sort.Strings(comps)
	for _, c := range comps {
		d := filepath.Join(dir, c)
		if _, err := goCmd(ctx, d, append([]string{"mod", "edit"}, byComp[c]...)...); err != nil {
			return err
		}
		if _, err := goCmd(ctx, d, "mod", "tidy"); err != nil {
			return err
		}
	}
	return nil
}

// stagingModules lists the k8s.io modules that Kubernetes' own go.mod
// requires at v0.0.0 and replaces with its staging directories.
func (v *Versions) stagingModules(ctx context.Context) ([]string, error) {
	kdir, err := v.kubernetesSource(ctx)
	if err != nil {
		return nil, err
	}
	m, err := readGoMod(ctx, kdir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range m.Require {
		if strings.HasPrefix(r.Path, "k8s.io/") && r.Version == "v0.0.0" {
			out = append(out, r.Path)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("k8s.io/kubernetes %s requires no staging modules at v0.0.0; the replace scheme has changed", v.Kubernetes)
	}
	return out, nil
}

// kubernetesSource is the pinned Kubernetes module's directory in the
// module cache, downloading it if needed.
func (v *Versions) kubernetesSource(ctx context.Context) (string, error) {
	tmp, err := os.MkdirTemp("", "terrarium-pins-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out, err := goCmd(ctx, tmp, "mod", "download", "-json", "k8s.io/kubernetes@"+v.Kubernetes)
	if err != nil {
		return "", err
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", v.Kubernetes, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download k8s.io/kubernetes@%s: %s", v.Kubernetes, m.Error)
	}
	return m.Dir, nil
}

var kubeadmConst = regexp.MustCompile(`(?m)^\s*(DefaultEtcdVersion|CoreDNSVersion|PauseVersion)\s*=\s*"([^"]+)"`)

// KubeadmExpects reads what the pinned kubeadm deploys by default: its
// etcd image tag, CoreDNS version and pause tag
// (cmd/kubeadm/app/constants/constants.go).
func (v *Versions) KubeadmExpects(ctx context.Context) (map[string]string, error) {
	kdir, err := v.kubernetesSource(ctx)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(kdir, "cmd", "kubeadm", "app", "constants", "constants.go")
	src, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read kubeadm constants: %w", err)
	}
	got := map[string]string{}
	for _, m := range kubeadmConst.FindAllSubmatch(src, -1) {
		got[string(m[1])] = string(m[2])
	}
	for _, k := range []string{"DefaultEtcdVersion", "CoreDNSVersion", "PauseVersion"} {
		if got[k] == "" {
			return nil, fmt.Errorf("%s: %s not found", p, k)
		}
	}
	return got, nil
}

// CheckKubeadm reports where etcd, CoreDNS or pause differ from what the
// pinned kubeadm expects.
func (v *Versions) CheckKubeadm(ctx context.Context) error {
	want, err := v.KubeadmExpects(ctx)
	if err != nil {
		return err
	}
	var problems []string
	if want["DefaultEtcdVersion"] != v.EtcdTag() {
		problems = append(problems, fmt.Sprintf("etcd: kubeadm %s deploys etcd %s; %s pins %s (tag %s)", v.Kubernetes, want["DefaultEtcdVersion"], VersionsFile, v.Etcd, v.EtcdTag()))
	}
	if want["CoreDNSVersion"] != v.CoreDNS {
		problems = append(problems, fmt.Sprintf("coredns: kubeadm %s deploys %s; %s pins %s", v.Kubernetes, want["CoreDNSVersion"], VersionsFile, v.CoreDNS))
	}
	if want["PauseVersion"] != v.Pause {
		problems = append(problems, fmt.Sprintf("pause: kubeadm %s expects %s; %s pins %s", v.Kubernetes, want["PauseVersion"], VersionsFile, v.Pause))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}

func goCmd(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			msg = "\n" + strings.TrimSpace(string(ee.Stderr))
		}
		return nil, fmt.Errorf("go %s (in %s): %w%s", strings.Join(args, " "), dir, err, msg)
	}
	return out, nil
}
