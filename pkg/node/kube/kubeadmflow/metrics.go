package kubeadmflow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/csrsigner"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
)

// stepMetrics applies the resource metrics API (metrics-server).
const stepMetrics = "resource metrics (metrics-server)"

// metricsServerImage is the metrics-server image the bundle carries.
func metricsServerImage(h *Flow) string {
	return bundleImage(h, "registry.k8s.io/metrics-server/metrics-server", addons.DefaultMetricsServerImage)
}

// metricsServerInput is metrics-server's input on a control plane: the
// bundle's image and the cluster CA, which issues its serving pair.
func metricsServerInput(h *Flow) (addons.MetricsServerInput, error) {
	certPEM, err := os.ReadFile(h.Path(filepath.Join(KubernetesPKIDir, "ca.crt")))
	if err != nil {
		return addons.MetricsServerInput{}, fmt.Errorf("metrics-server: the cluster CA: %w", err)
	}
	keyPEM, err := os.ReadFile(h.Path(filepath.Join(KubernetesPKIDir, "ca.key")))
	if err != nil {
		return addons.MetricsServerInput{}, fmt.Errorf("metrics-server: the cluster CA: %w", err)
	}
	ca, key, err := csrsigner.LoadCA(certPEM, keyPEM)
	if err != nil {
		return addons.MetricsServerInput{}, fmt.Errorf("metrics-server: %s: %w", KubernetesPKIDir, err)
	}
	return addons.MetricsServerInput{
		Image: metricsServerImage(h), CA: ca, CAKey: key, DNSDomain: kubeadmconfig.DNSDomain, Now: h.Now(),
	}, nil
}

// applyMetricsServer renders metrics-server's manifest with a serving
// pair it issues from the cluster CA and applies it as the admin. The
// manifest is never written to disk: it holds the pair's key.
func applyMetricsServer(in addons.MetricsServerInput) func(ctx context.Context, h *Flow, c *machineconfig.Config, api APIClient) error {
	return func(ctx context.Context, _ *Flow, _ *machineconfig.Config, api APIClient) error {
		m, err := addons.MetricsServer(in)
		if err != nil {
			return err
		}
		if err := api.ApplyManifest(ctx, m, AddonFieldManager); err != nil {
			return fmt.Errorf("metrics-server: %w", err)
		}
		return nil
	}
}
