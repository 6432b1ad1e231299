package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// stepLoadBalancer applies MetalLB and the cluster's address pool.
const stepLoadBalancer = "LoadBalancer addresses (MetalLB)"

// crdEstablishWait bounds the wait for MetalLB's CRDs to be served: the
// API server serves a new CRD's objects within seconds.
const crdEstablishWait = 2 * time.Minute

// applyMetalLB applies MetalLB's CRDs, MetalLB itself (manifest) and
// then the pool from the cluster config, once the API serves the CRDs'
// kinds.
func applyMetalLB(manifest, pool []byte) func(ctx context.Context, h *Flow, c *machineconfig.Config, api APIClient) error {
	return func(ctx context.Context, h *Flow, _ *machineconfig.Config, api APIClient) error {
		if err := api.ApplyManifest(ctx, addons.MetalLBCRDs, AddonFieldManager); err != nil {
			return fmt.Errorf("metallb's CRDs: %w", err)
		}
		if err := api.ApplyManifest(ctx, manifest, AddonFieldManager); err != nil {
			return fmt.Errorf("metallb: %w", err)
		}
		deadline := h.Now().Add(crdEstablishWait)
		for {
			err := api.ApplyManifest(ctx, pool, AddonFieldManager)
			if err == nil {
				return nil
			}
			if !errors.Is(err, kubeclient.ErrNotFound) || !h.Now().Before(deadline) {
				return fmt.Errorf("metallb's address pool: %w", err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(h.Timing.APIPoll):
			}
		}
	}
}
