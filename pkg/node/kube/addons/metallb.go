package addons

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"text/template"
)

// The MetalLB images used when the bundle names none.
const (
	DefaultMetalLBControllerImage = "quay.io/metallb/controller:v0.14.9"
	DefaultMetalLBSpeakerImage    = "quay.io/metallb/speaker:v0.14.9"
)

// MetalLBCRDs are MetalLB's CustomResourceDefinitions, applied before
// MetalLB itself (components/metallb keeps them equal to the pinned
// release's).
//
//go:embed metallb-crds.yaml
var MetalLBCRDs []byte

//go:embed metallb.yaml.tmpl
var metalLBTemplate string

//go:embed metallb-pool.yaml.tmpl
var metalLBPoolTemplate string

// MetalLBInput are the settings of MetalLB's manifests.
type MetalLBInput struct {
	ControllerImage, SpeakerImage string
	// Addresses are the pool's ranges (machineconfig.LoadBalancer),
	// checked by the config's validation.
	Addresses []string
}

// MetalLB renders MetalLB's manifest (its namespace, rights, controller
// and speakers) and its pool's (the IPAddressPool and its
// L2Advertisement), which needs MetalLBCRDs established first.
func MetalLB(in MetalLBInput) (manifest, pool []byte, err error) {
	if in.ControllerImage == "" {
		in.ControllerImage = DefaultMetalLBControllerImage
	}
	if in.SpeakerImage == "" {
		in.SpeakerImage = DefaultMetalLBSpeakerImage
	}
	if len(in.Addresses) == 0 {
		return nil, nil, errors.New("metallb: the pool has no addresses")
	}
	manifest, err = renderManifest("metallb", metalLBTemplate, in)
	if err != nil {
		return nil, nil, err
	}
	pool, err = renderManifest("metallb-pool", metalLBPoolTemplate, in)
	if err != nil {
		return nil, nil, err
	}
	return manifest, pool, nil
}

func renderManifest(name, text string, in any) ([]byte, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parse %s manifest: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, in); err != nil {
		return nil, fmt.Errorf("render %s manifest: %w", name, err)
	}
	return b.Bytes(), nil
}
