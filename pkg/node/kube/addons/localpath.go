package addons

import (
	_ "embed"
	"fmt"
	"path/filepath"
)

// DefaultLocalPathImage is used when the bundle names none.
const DefaultLocalPathImage = "docker.io/rancher/local-path-provisioner:v0.0.30"

//go:embed local-path-provisioner.yaml.tmpl
var localPathTemplate string

// LocalPathInput are the settings of local-path-provisioner's manifest.
type LocalPathInput struct {
	Image string
	// VolumesDir is every node's volume area (layout.LocalVolumesDir).
	VolumesDir string
}

// LocalPath renders the manifest of local-path-provisioner, the cluster's
// default StorageClass (local-path): its service account and rights, its
// configuration, its Deployment in kube-system and the StorageClass.
func LocalPath(in LocalPathInput) ([]byte, error) {
	if in.Image == "" {
		in.Image = DefaultLocalPathImage
	}
	if !filepath.IsAbs(in.VolumesDir) || filepath.Clean(in.VolumesDir) != in.VolumesDir {
		return nil, fmt.Errorf("local-path-provisioner: the volume area %q is not a clean absolute path", in.VolumesDir)
	}
	return renderManifest("local-path-provisioner", localPathTemplate, in)
}
