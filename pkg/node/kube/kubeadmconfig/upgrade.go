package kubeadmconfig

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
)

// UpgradeInput is what a node's kubeadm upgrade configuration is made of.
type UpgradeInput struct {
	// KubernetesVersion is the new slot's (v1.36.4).
	KubernetesVersion string
	// ControlPlane: the node runs the control plane's static pods, which
	// Terrarium patches (PatchesDir).
	ControlPlane bool
	// IgnorePreflightErrors are the checks kubeadm reports as warnings.
	IgnorePreflightErrors []string
	// SkipApplyPreflight skips `upgrade apply`'s preflight phase: for a
	// patch upgrade, whose version policy holds by construction, once the
	// caller checked the cluster as that phase would. Its CreateJob check
	// (ignored, as the drained node cannot run its pod) would otherwise
	// wait up to a minute for a Job on another node.
	SkipApplyPreflight bool
}

// RenderUpgrade renders the UpgradeConfiguration (v1beta4) that `kubeadm
// upgrade apply` and `kubeadm upgrade node` read: the images from the
// node's registry (IfNotPresent), Terrarium's patches of the control
// plane's static pods (which kubeadm keeps in no ConfigMap: without them an
// upgrade regenerates the manifests without the patient probes), the
// timeouts of formation (minutes under emulation, where kubeadm's defaults
// would roll the upgrade back), and a release candidate or pre-release
// allowed when that is what the slot carries.
func RenderUpgrade(in UpgradeInput) ([]byte, error) {
	if in.KubernetesVersion == "" {
		return nil, fmt.Errorf("render kubeadm upgrade configuration: no Kubernetes version")
	}
	_, pre, _ := strings.Cut(strings.TrimPrefix(in.KubernetesVersion, "v"), "-")
	t, err := template.New("upgrade").Parse(upgradeTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = t.Execute(&b, map[string]any{
		"Version": in.KubernetesVersion, "ControlPlane": in.ControlPlane, "PatchesDir": PatchesDir, "SkipPreflight": in.SkipApplyPreflight,
		"Ignore": in.IgnorePreflightErrors, "RC": strings.HasPrefix(pre, "rc"),
		"Experimental": strings.HasPrefix(pre, "alpha") || strings.HasPrefix(pre, "beta"),
	})
	if err != nil {
		return nil, fmt.Errorf("render kubeadm upgrade configuration: %w", err)
	}
	return b.Bytes(), nil
}

// upgradeTemplate's "common" block is what apply and node share.
const upgradeTemplate = `{{define "common"}}
  imagePullPolicy: IfNotPresent
  ignorePreflightErrors: [{{range $i, $c := .Ignore}}{{if $i}}, {{end}}"{{$c}}"{{end}}]
{{- if .ControlPlane}}
  patches:
    directory: "{{.PatchesDir}}"
{{- end}}
{{- end}}# Written by Terrarium firstboot for a Kubernetes upgrade; kubeadm reads it.
apiVersion: kubeadm.k8s.io/v1beta4
kind: UpgradeConfiguration
apply:
  kubernetesVersion: "{{.Version}}"
{{- if .RC}}
  allowRCUpgrades: true
{{- end}}
{{- if .Experimental}}
  allowExperimentalUpgrades: true
{{- end}}
{{- if .SkipPreflight}}
  skipPhases: ["preflight"]
{{- end}}
{{- template "common" .}}
node:
{{- template "common" .}}
# As generous as formation's (see the init and join configurations).
timeouts:
  controlPlaneComponentHealthCheck: 20m0s
  kubeletHealthCheck: 10m0s
  kubernetesAPICall: 2m0s
  etcdAPICall: 10m0s
  upgradeManifests: 20m0s
`
