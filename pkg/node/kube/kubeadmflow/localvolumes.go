package kubeadmflow

import (
	"context"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// PhaseLocalVolumes makes and mounts the node's volume area for the
// local-path StorageClass (Deps.Volumes), before the kubelet may start a
// pod on it.
const PhaseLocalVolumes = "local-volumes"

// StepLocalVolumes reports the volume area's size, or why the node has
// none.
const StepLocalVolumes = "volume area"

func applyLocalVolumes(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.LocalStorageEnabled() {
		return nil
	}
	res, err := h.Volumes.Ensure(ctx, c.Cluster.LocalVolumesSize(), c.LocalVolumesKeep())
	if err != nil {
		return err
	}
	switch {
	case res.Skipped != "":
		h.Report.Report(StepLocalVolumes, step.Skipped, res.Skipped)
	case res.Made:
		h.Report.Report(StepLocalVolumes, step.Applied, fmt.Sprintf("%d MiB on TERRA-STATE", res.Size>>20))
	}
	return nil
}

func verifyLocalVolumes(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.LocalStorageEnabled() {
		return nil
	}
	return h.Volumes.Check()
}
