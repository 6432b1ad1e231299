package kubeadmflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// The cluster's add-ons: the pod network, the cluster DNS's
// configuration, the upgrades' rights and the workloads' add-ons
// (storage, metrics, LoadBalancer addresses). The init node applies them
// as it forms the cluster (its kubeadm steps); an OS upgrade brings a slot
// whose bundle carries newer images and manifests. The cluster-addons
// phase keeps them as the newest slot among the control planes renders
// them, as kubeadm's `upgrade apply` does for CoreDNS and kube-proxy:
//
//   - each add-on is rendered in memory from the slot's bundle and the
//     cluster config, and its fingerprint is the SHA-256 of that manifest
//     (metrics-server's without the serving pair it issues each time);
//   - the record, ConfigMap kube-system/terrarium-addons, holds for each
//     add-on the fingerprint applied, the OS release that applied it and
//     the node: one key per add-on, each written by server-side apply
//     under a field manager of its own;
//   - a control plane applies an add-on whose record is missing or names
//     another fingerprint, unless another node applied it from a newer
//     release: a node not yet upgraded never takes an add-on back. The
//     node that applied it from a newer slot and runs an older one again
//     (its upgrade rolled back: as the first control plane of a rollout,
//     no other node runs that release) takes it back, since the images
//     it named are in no bundle the cluster still has. A switch turned
//     off does not remove an add-on (docs/workloads.md).

// The record of the add-ons applied.
const (
	AddonsRecordNamespace = "kube-system"
	AddonsRecordName      = "terrarium-addons"
	// addonRecordManager prefixes the field manager of each add-on's key.
	addonRecordManager = "terrarium-addons/"
)

// PhaseClusterAddons keeps the cluster's add-ons as this slot renders them.
const PhaseClusterAddons = "cluster-addons"

// The add-ons, by their keys in the record.
const (
	addonPodNetwork   = "pod-network"
	addonClusterDNS   = "cluster-dns"
	addonUpgrades     = "upgrade-coordination"
	addonLocalStorage = "local-storage"
	addonMetrics      = "metrics"
	addonLoadBalancer = "load-balancer"
)

// addon is one of the cluster's add-ons as this slot renders it.
type addon struct {
	name string
	// fingerprint is "sha256:" and the hex digest of what decides it.
	fingerprint string
	apply       func(ctx context.Context, h *Flow, c *machineconfig.Config, api APIClient) error
}

// addonRecord is one add-on's entry in the record.
type addonRecord struct {
	Fingerprint string `json:"fingerprint"`
	// Release is the OS release (release.json's version) of the node
	// that applied it; Node its name.
	Release string `json:"release"`
	Node    string `json:"node"`
}

func fingerprint(parts ...[]byte) string {
	d := sha256.New()
	for _, p := range parts {
		// Each part's length first: two parts never read as another two.
		// A hash's Write never fails.
		_, _ = fmt.Fprintf(d, "%d\n", len(p))
		_, _ = d.Write(p)
	}
	return "sha256:" + hex.EncodeToString(d.Sum(nil))
}

// applyManifests applies manifests in order as the add-ons' field manager.
func applyManifests(ms ...[]byte) func(ctx context.Context, h *Flow, c *machineconfig.Config, api APIClient) error {
	return func(ctx context.Context, _ *Flow, _ *machineconfig.Config, api APIClient) error {
		for _, m := range ms {
			if err := api.ApplyManifest(ctx, m, AddonFieldManager); err != nil {
				return err
			}
		}
		return nil
	}
}

// clusterAddons renders the add-ons the cluster config switches on (of
// those named, or all without names), as this slot's bundle has them, in
// the order the init node applies them.
func clusterAddons(h *Flow, c *machineconfig.Config, names ...string) ([]addon, error) {
	cl := c.Cluster
	type spec struct {
		name   string
		on     bool
		render func() (addon, error)
	}
	specs := []spec{
		{addonPodNetwork, true, func() (addon, error) {
			flannel, err := addons.Flannel(addons.FlannelInput{PodCIDR: cl.PodCIDR, Image: flannelImage(h), APIPort: machineconfig.LocalAPIPort})
			if err != nil {
				return addon{}, err
			}
			np, err := addons.NetworkPolicy(addons.NetworkPolicyInput{Image: networkPolicyImage(h), APIPort: machineconfig.LocalAPIPort})
			if err != nil {
				return addon{}, err
			}
			return addon{fingerprint: fingerprint(flannel, np), apply: applyManifests(flannel, np)}, nil
		}},
		{addonClusterDNS, true, func() (addon, error) {
			dns, err := addons.CoreDNSConfig(kubeadmconfig.DNSDomain)
			if err != nil {
				return addon{}, err
			}
			return addon{fingerprint: fingerprint(dns), apply: applyManifests(dns)}, nil
		}},
		{addonUpgrades, true, func() (addon, error) {
			return addon{fingerprint: fingerprint(addons.Upgrades), apply: applyManifests(addons.Upgrades)}, nil
		}},
		{addonLocalStorage, cl.LocalStorageEnabled(), func() (addon, error) {
			lp, err := addons.LocalPath(addons.LocalPathInput{Image: localPathImage(h), VolumesDir: layout.LocalVolumesDir})
			if err != nil {
				return addon{}, err
			}
			return addon{fingerprint: fingerprint(lp), apply: applyManifests(lp)}, nil
		}},
		{addonMetrics, cl.MetricsEnabled(), func() (addon, error) {
			in, err := metricsServerInput(h)
			if err != nil {
				return addon{}, err
			}
			shape, err := addons.MetricsServerWithoutPair(in)
			if err != nil {
				return addon{}, err
			}
			return addon{fingerprint: fingerprint(shape), apply: applyMetricsServer(in)}, nil
		}},
		{addonLoadBalancer, cl.LoadBalancerEnabled(), func() (addon, error) {
			manifest, pool, err := addons.MetalLB(addons.MetalLBInput{
				ControllerImage: bundleImage(h, "quay.io/metallb/controller", addons.DefaultMetalLBControllerImage),
				SpeakerImage:    bundleImage(h, "quay.io/metallb/speaker", addons.DefaultMetalLBSpeakerImage),
				Addresses:       cl.LoadBalancer.Addresses,
			})
			if err != nil {
				return addon{}, err
			}
			return addon{fingerprint: fingerprint(addons.MetalLBCRDs, manifest, pool), apply: applyMetalLB(manifest, pool)}, nil
		}},
	}
	var out []addon
	for _, sp := range specs {
		if !sp.on || (len(names) > 0 && !slices.Contains(names, sp.name)) {
			continue
		}
		a, err := sp.render()
		if err != nil {
			return nil, fmt.Errorf("add-on %s: %w", sp.name, err)
		}
		a.name = sp.name
		out = append(out, a)
	}
	return out, nil
}

// applyAddon is the init node's kubeadm step for one add-on: applied as
// this slot renders it, then recorded.
func applyAddon(name string) func(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	return func(ctx context.Context, h *Flow, c *machineconfig.Config) error {
		all, err := clusterAddons(h, c, name)
		if err != nil {
			return err
		}
		if len(all) == 0 {
			return fmt.Errorf("add-on %s: not switched on in this cluster's config", name)
		}
		api, err := h.API(AdminKubeconfig)
		if err != nil {
			return err
		}
		rel, err := slotRelease(h)
		if err != nil {
			return err
		}
		return applyAndRecord(ctx, h, c, api, all[0], rel)
	}
}

func applyAndRecord(ctx context.Context, h *Flow, c *machineconfig.Config, api APIClient, a addon, rel string) error {
	if err := a.apply(ctx, h, c, api); err != nil {
		return fmt.Errorf("add-on %s: %w", a.name, err)
	}
	entry, err := json.Marshal(addonRecord{Fingerprint: a.fingerprint, Release: rel, Node: c.Hostname})
	if err != nil {
		return err
	}
	cm, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"namespace": AddonsRecordNamespace, "name": AddonsRecordName},
		"data":     map[string]string{a.name: string(entry)},
	})
	if err != nil {
		return err
	}
	if err := api.ApplyManifest(ctx, cm, addonRecordManager+a.name); err != nil {
		return fmt.Errorf("record add-on %s: %w", a.name, err)
	}
	return nil
}

// slotRelease is the OS release of the slot whose Kubernetes, and whose
// bundle's add-on images, the node runs (KubernetesRoot): the booted
// slot's, or the staged slot's while the node runs it in place.
func slotRelease(h *Flow) (string, error) {
	rel, err := release.Load(h.Path(filepath.Join(h.KubernetesRoot(), layout.ReleaseFile)))
	if err != nil {
		return "", fmt.Errorf("the slot's release: %w", err)
	}
	return rel.Version, nil
}

// addonsRecord reads the record; empty when there is none yet.
func addonsRecord(ctx context.Context, api APIClient) (map[string]addonRecord, error) {
	cm, err := api.ConfigMap(ctx, AddonsRecordNamespace, AddonsRecordName)
	if errors.Is(err, kubeclient.ErrNotFound) {
		return map[string]addonRecord{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]addonRecord, len(cm.Data))
	for k, v := range cm.Data {
		var r addonRecord
		// An entry that does not parse is as good as none: applied again.
		if json.Unmarshal([]byte(v), &r) == nil {
			out[k] = r
		}
	}
	return out, nil
}

// addonPlan is what the phase finds: the add-ons to apply and those a
// newer release keeps, with the API and this slot's release it found
// them with.
type addonPlan struct {
	api     APIClient
	release string
	apply   []addon
	// newer are the add-ons a newer release applied, with its entry.
	newer map[string]addonRecord
}

// planAddons compares this slot's add-ons with the record.
func planAddons(ctx context.Context, h *Flow, c *machineconfig.Config) (addonPlan, error) {
	api, err := h.API(AdminKubeconfig)
	if err != nil {
		return addonPlan{}, err
	}
	rel, err := slotRelease(h)
	if err != nil {
		return addonPlan{}, err
	}
	all, err := clusterAddons(h, c)
	if err != nil {
		return addonPlan{}, err
	}
	rec, err := addonsRecord(ctx, api)
	if err != nil {
		return addonPlan{}, fmt.Errorf("the add-ons' record: %w", err)
	}
	p := addonPlan{api: api, release: rel, newer: map[string]addonRecord{}}
	for _, a := range all {
		r, ok := rec[a.name]
		switch {
		case ok && r.Fingerprint == a.fingerprint:
		case ok && newerRelease(r.Release, rel) && r.Node != c.Hostname:
			p.newer[a.name] = r
		default:
			p.apply = append(p.apply, a)
		}
	}
	return p, nil
}

// newerRelease says whether release a is newer than b. A version that
// does not parse is never newer: the add-on is applied again.
func newerRelease(a, b string) bool {
	c, err := upgrade.CompareVersions(a, b)
	return err == nil && c > 0
}

func (p addonPlan) names() string {
	names := make([]string, len(p.apply))
	for i, a := range p.apply {
		names[i] = a.name
	}
	return strings.Join(names, ", ")
}

// errAddonsBehind: the cluster's add-ons are not what this slot renders.
var errAddonsBehind = errors.New("the cluster's add-ons differ from this slot's")

// addonsPhase is the cluster-addons phase, after kubernetes-upgrade: on
// a control plane, the add-ons as this slot renders them.
func (f *Flow) addonsPhase() phase.Phase {
	return phase.Phase{
		Name: PhaseClusterAddons,
		Apply: func(ctx context.Context, c *machineconfig.Config) error {
			return applyClusterAddons(ctx, f, c)
		},
		Verify: func(ctx context.Context, c *machineconfig.Config) error {
			return verifyClusterAddons(ctx, f, c)
		},
	}
}

func verifyClusterAddons(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.IsControlPlane() {
		return nil
	}
	p, err := planAddons(ctx, h, c)
	if err != nil {
		return err
	}
	if len(p.apply) > 0 {
		return fmt.Errorf("%w: %s", errAddonsBehind, p.names())
	}
	return nil
}

func applyClusterAddons(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.IsControlPlane() {
		return nil
	}
	p, err := planAddons(ctx, h, c)
	if err != nil {
		return err
	}
	newer := make([]string, 0, len(p.newer))
	for name := range p.newer {
		newer = append(newer, name)
	}
	sort.Strings(newer)
	for _, name := range newer {
		r := p.newer[name]
		h.Report.Report("add-on "+name, step.Skipped, fmt.Sprintf("release %s applied it on %s, newer than this %s", r.Release, r.Node, p.release))
	}
	for _, a := range p.apply {
		what := "add-on " + a.name
		h.Report.Report(what, step.Started, "as release "+p.release+" renders it")
		if err := applyAndRecord(ctx, h, c, p.api, a, p.release); err != nil {
			return err
		}
		h.Report.Report(what, step.Done, a.fingerprint)
	}
	return nil
}
