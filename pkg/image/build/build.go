// Package build runs imagebuild's pipeline: rootfs base, initramfs, slot
// images, ESP, disk, qcow2, vmdk, ova, iso and the manifest. Every expensive
// stage is cached by content hash; the outputs are reproducible from the
// same inputs.
package build

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/diskimage"
	"github.com/terrarium-os/terrarium/pkg/image/esp"
	"github.com/terrarium-os/terrarium/pkg/image/initramfs"
	"github.com/terrarium-os/terrarium/pkg/image/progress"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// Inputs names the build's program inputs, built from this repository.
type Inputs struct {
	Firstboot string // the firstboot binary for the rootfs
	Init      string // the initramfs /init binary
}

// Options of a build.
type Options struct {
	OutDir   string
	Cache    *cache.Cache
	Log      *slog.Logger
	Progress io.Writer
	// PreferSource picks the bundle images' alternatives of this source
	// kind (see bundle.WithPreferredSource); "" uses their sources.
	PreferSource string
}

// Result is what a build wrote.
type Result struct {
	Manifest *Manifest
	Map      string // the drawn partition map
}

type run struct {
	spec  *spec.Spec
	in    Inputs
	opt   Options
	stage *progress.Stages
	work  string
	man   *Manifest

	base     *rootfs.Base
	bundle   *bundleLayout
	programs []rootfs.Program
	initrd   string
	slots    map[layout.Slot]string
	esp      string
	placed   []diskimage.Placed
	size     int64
	vmdk     vmdkImage
}

// Run builds the image s describes.
func Run(ctx context.Context, s *spec.Spec, in Inputs, opt Options) (*Result, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	// go-diskfs takes FAT timestamps from SOURCE_DATE_EPOCH; there is no
	// other way to hand it the build's fixed time.
	os.Setenv("SOURCE_DATE_EPOCH", strconv.FormatInt(s.Epoch().Unix(), 10))
	if err := os.MkdirAll(opt.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("create output dir: %w", err)
	}
	work, err := os.MkdirTemp(opt.OutDir, ".work-")
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(work)
	r := &run{spec: s, in: in, opt: opt, work: work, slots: map[layout.Slot]string{}, man: newManifest(s)}
	stages := []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{"rootfs base (mmdebstrap)", r.buildBase},
		{"initramfs", r.buildInitramfs},
		{"components (go build)", r.buildComponents},
		{"bundles (OCI layout)", r.buildBundles},
		{"slot images (mksquashfs)", r.buildSlots},
		{"EFI system partition", r.buildESP},
		{"raw disk image", r.buildRaw},
		{"qcow2 image", r.buildQCOW2},
		{"vmdk image (streamOptimized)", r.buildVMDK},
		{"ova (vSphere)", r.buildOVA},
		{"iso (hybrid, UEFI)", r.buildISO},
		{"upgrade file", r.buildUpgradeFile},
		{"manifest", r.writeManifest},
	}
	r.stage = progress.New(opt.Progress, len(stages))
	for _, st := range stages {
		r.stage.Start(st.name)
		note, err := st.fn(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		r.stage.Done(note)
	}
	return &Result{Manifest: r.man, Map: diskimage.Draw(r.placed, r.size)}, nil
}

func cachedNote(cached bool) string {
	if cached {
		return "(cached)"
	}
	return ""
}

func (r *run) buildBase(ctx context.Context) (string, error) {
	b, err := rootfs.BuildBase(ctx, r.opt.Cache, r.spec.OS, r.spec.Epoch(), r.opt.Log)
	if err != nil {
		return "", err
	}
	r.base = b
	return cachedNote(b.Cached), r.man.addBase(b)
}

func (r *run) buildInitramfs(ctx context.Context) (string, error) {
	mods := r.spec.Kernel.Modules
	if len(mods) == 0 {
		mods = initramfs.DefaultModules()
	}
	key, err := cache.NewKey("initramfs/v1").String("base", r.base.Key).
		File("init", r.in.Init).Strings("modules", mods).Sum()
	if err != nil {
		return "", err
	}
	dir, cached, err := r.opt.Cache.Fill(ctx, "initramfs", key, func(ctx context.Context, dir string) error {
		f, err := os.Create(filepath.Join(dir, "initrd.img"))
		if err != nil {
			return err
		}
		defer f.Close()
		err = initramfs.Write(f, initramfs.Inputs{
			Init: r.in.Init, Busybox: filepath.Join(r.base.Dir, rootfs.BaseBusybox),
			ModulesDir: filepath.Join(r.base.Dir, rootfs.BaseModules), Modules: mods,
		})
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		return "", err
	}
	r.initrd = filepath.Join(dir, "initrd.img")
	return cachedNote(cached), nil
}

func (r *run) release(faults []string) release.Release {
	return release.Release{
		Name: r.spec.Name, Version: r.spec.Version, Suite: r.spec.OS.Suite,
		KernelVersion: r.base.KernelVersion(), BuiltAt: r.spec.Epoch().Format("2006-01-02T15:04:05Z"),
		Faults: faults,
	}
}

func (r *run) buildSlots(ctx context.Context) (string, error) {
	keys, err := r.spec.UpgradeKeys()
	if err != nil {
		return "", fmt.Errorf("upgrade keys: %w", err)
	}
	in := rootfs.SlotInputs{
		Base: r.base, Overlay: r.spec.Resolve(r.spec.OS.Overlay), Firstboot: r.in.Firstboot,
		Release: r.release(r.spec.Faults), Enable: r.spec.OS.Enable, Programs: r.programs,
	}
	for _, k := range keys {
		in.UpgradeKeys = append(in.UpgradeKeys, k.String())
	}
	if r.bundle != nil {
		in.BundleDir, in.BundleKey = r.bundle.dir, r.bundle.key
	}
	a, cached, err := rootfs.BuildSlot(ctx, r.opt.Cache, in, r.spec.Epoch(), r.opt.Log)
	if err != nil {
		return "", fmt.Errorf("slot A: %w", err)
	}
	r.slots[layout.SlotA] = a
	if r.spec.SlotB.Mode == spec.SlotCopy {
		in.Release = r.release(r.spec.SlotB.Faults)
		b, bc, err := rootfs.BuildSlot(ctx, r.opt.Cache, in, r.spec.Epoch(), r.opt.Log)
		if err != nil {
			return "", fmt.Errorf("slot B: %w", err)
		}
		r.slots[layout.SlotB] = b
		cached = cached && bc
	}
	return cachedNote(cached), nil
}

func (r *run) buildESP(ctx context.Context) (string, error) {
	c := esp.Contents{
		SystemdBoot:    filepath.Join(r.base.Dir, rootfs.BaseSDBoot),
		TimeoutSeconds: r.spec.Boot.TimeoutSeconds,
	}
	def := layout.Slot(r.spec.Boot.Default)
	for _, slot := range layout.Slots() {
		if _, ok := r.slots[slot]; !ok {
			continue
		}
		sortKey := "terrarium-2"
		if slot == def {
			sortKey = "terrarium-1"
		}
		c.Entries = append(c.Entries, esp.Entry{
			Slot: slot, Title: fmt.Sprintf("Terrarium %s (slot %s)", r.spec.Version, slot),
			Version: r.spec.Version, Kernel: filepath.Join(r.base.Dir, rootfs.BaseKernel), Initrd: r.initrd,
			Cmdline: r.spec.Kernel.Cmdline, Tries: r.spec.Boot.Tries, SortKey: sortKey,
		})
	}
	r.esp = filepath.Join(r.work, "esp.img")
	return "", esp.Write(r.esp, r.spec.Disk.ESPSizeMiB*layout.MiB, c)
}

func (r *run) buildRaw(ctx context.Context) (string, error) {
	slotSize := r.spec.Disk.SlotSizeMiB * layout.MiB
	parts := []diskimage.Partition{
		{Label: layout.LabelESP, Type: layout.TypeESP, Size: r.spec.Disk.ESPSizeMiB * layout.MiB, Source: r.esp},
		{Label: layout.LabelSlotA, Type: layout.TypeRootX86_64, Size: slotSize, Source: r.slots[layout.SlotA]},
		{Label: layout.LabelSlotB, Type: layout.TypeRootX86_64, Size: slotSize, Source: r.slots[layout.SlotB]},
	}
	out := r.outPath(spec.OutputRaw)
	placed, err := diskimage.WriteRaw(ctx, out, r.spec.Name+"/"+r.spec.Version, parts)
	if err != nil {
		return "", err
	}
	r.placed = placed
	_, r.size = diskimage.Plan(r.spec.Name+"/"+r.spec.Version, parts)
	r.man.addPartitions(placed)
	return "", nil
}

func (r *run) buildQCOW2(ctx context.Context) (string, error) {
	if !r.spec.WantsOutput(spec.OutputQCOW2) {
		return "(not requested)", nil
	}
	return "", diskimage.ConvertQCOW2(ctx, r.outPath(spec.OutputRaw), r.outPath(spec.OutputQCOW2))
}

func (r *run) outPath(format string) string {
	return filepath.Join(r.opt.OutDir, r.spec.Name+"."+format)
}

func (r *run) writeManifest(ctx context.Context) (string, error) {
	for _, f := range r.spec.Outputs {
		if err := r.man.addOutput(f, r.outPath(f)); err != nil {
			return "", err
		}
	}
	if !r.spec.WantsOutput(spec.OutputRaw) { // raw is the intermediate of every other format
		os.Remove(r.outPath(spec.OutputRaw))
	}
	return "", r.man.write(filepath.Join(r.opt.OutDir, "manifest.json"))
}
