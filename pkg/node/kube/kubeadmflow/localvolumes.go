package kubeadmflow

import (
	"context"
	"fmt"
	"os"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/localvolumes"
	"github.com/terrarium-os/terrarium/pkg/node/kube/volumebackup"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// PhaseLocalVolumes makes and mounts the node's volume area for the
// local-path StorageClass (Deps.Volumes), before the kubelet may start a
// pod on it.
const PhaseLocalVolumes = "local-volumes"

// StepLocalVolumes reports the volume area's size, or why the node has
// none.
const StepLocalVolumes = "volume area"

// StepRestoreVolumes reports the restore of a new node's volumes from a
// TERRA-BACKUP stick (volumebackup.Restore).
const StepRestoreVolumes = "restore volumes from a backup"

func applyLocalVolumes(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.LocalStorageEnabled() {
		return nil
	}
	res, err := h.Volumes.Ensure(ctx, localvolumes.Spec{
		Size: c.Cluster.LocalVolumesSize(), Keep: c.LocalVolumesKeep(), Disk: c.Cluster.LocalVolumesDisk(),
	})
	if err != nil {
		return err
	}
	switch {
	case res.Skipped != "":
		h.Report.Report(StepLocalVolumes, step.Skipped, res.Skipped)
		return nil
	case res.Made && res.Disk != "" && res.Encrypted:
		h.Report.Report(StepLocalVolumes, step.Applied, fmt.Sprintf("%d MiB, the whole disk %s, encrypted (LUKS2, its key on TERRA-STATE)", res.Size>>20, res.Disk))
	case res.Made && res.Disk != "":
		h.Report.Report(StepLocalVolumes, step.Applied, fmt.Sprintf("%d MiB, the whole disk %s", res.Size>>20, res.Disk))
	case res.Made:
		h.Report.Report(StepLocalVolumes, step.Applied, fmt.Sprintf("%d MiB on TERRA-STATE", res.Size>>20))
	}
	return restoreVolumes(ctx, h, c)
}

// restoreVolumes fills a new node's empty volume area from the newest
// volume backup of its name on a TERRA-BACKUP stick (Deps.VolumeBackups),
// before the kubelet starts a pod on it. A backup that is not this
// node's, or damaged, stops the phase: the node does not start its pods
// on empty volumes the operator meant to restore.
//
// Only a new node restores: once its kubelet has joined (a config change
// or a heal runs the phase again), a stick inserted for a backup never
// brings old volumes back.
func restoreVolumes(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if _, err := os.Stat(h.Path(KubeletKubeconfig)); err == nil {
		return nil
	}
	res, err := volumebackup.Restore(ctx, h.Host, c, h.VolumeBackups)
	if err != nil {
		h.Report.Report(StepRestoreVolumes, step.Failed, err.Error())
		return err
	}
	if res.Skipped != "" {
		h.Report.Report(StepRestoreVolumes, step.Skipped, res.Skipped)
		return nil
	}
	what := "the volumes"
	if res.Manifest != nil {
		what = fmt.Sprintf("%s of %s taken at %s", res.Manifest.VolumesSummary(), res.Manifest.Node, res.Manifest.TakenAt.Format("2006-01-02 15:04:05Z07:00"))
	}
	h.Report.Report(StepRestoreVolumes, step.Restored, fmt.Sprintf("%s from %s into %s", what, res.File, layout.LocalVolumesDir))
	return nil
}

func verifyLocalVolumes(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.LocalStorageEnabled() {
		return nil
	}
	return h.Volumes.Check()
}
