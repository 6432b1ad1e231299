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

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/image/biosboot"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/diskimage"
	"github.com/terrarium-os/terrarium/pkg/image/esp"
	"github.com/terrarium-os/terrarium/pkg/image/initramfs"
	"github.com/terrarium-os/terrarium/pkg/image/progress"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/sbom"
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
	// CacheMax bounds the cache: after a build, the least recently used
	// entries go until it holds at most this many bytes (cache.Prune).
	// 0 keeps everything.
	CacheMax int64
}

// Result is what a build wrote.
type Result struct {
	Manifest *Manifest
	Map      string // the drawn partition map
}

// step runs one stage of a build under its progress line. A stage is a
// function that takes its inputs and returns its output and a note for
// the progress line.
func step[T any](st *progress.Stages, name string, fn func() (T, string, error)) (T, error) {
	st.Start(name)
	out, note, err := fn()
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", name, err)
	}
	st.Done(note)
	return out, nil
}

// stageCount is the number of step calls in Run, for the progress bar.
const stageCount = 16

// Run builds the image s describes into opt.OutDir. Its stages take their
// inputs and return their outputs; Run is the only place that wires one
// stage's output into another's input.
func Run(ctx context.Context, s *spec.Spec, in Inputs, opt Options) (*Result, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	if err := os.MkdirAll(opt.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("create output dir: %w", err)
	}
	work, err := os.MkdirTemp(opt.OutDir, ".work-")
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(work)
	epoch := s.Epoch()
	out := func(format string) string { return filepath.Join(opt.OutDir, s.Name+"."+format) }
	man := newManifest(s)
	st := progress.New(opt.Progress, stageCount)

	base, err := step(st, "rootfs base (mmdebstrap)", func() (*rootfs.Base, string, error) {
		var lock *rootfs.OSLock
		if s.OS.Lock != "" {
			var err error
			if lock, err = rootfs.ReadOSLock(s.Resolve(s.OS.Lock)); err != nil {
				return nil, "", err
			}
		}
		b, err := rootfs.BuildBase(ctx, opt.Cache, s.OS, lock, epoch, opt.Log)
		if err != nil {
			return nil, "", err
		}
		return b, cachedNote(b.Cached), man.addBase(b)
	})
	if err != nil {
		return nil, err
	}
	boot := bootFiles{
		kernel: filepath.Join(base.Dir, rootfs.BaseKernel), sdboot: filepath.Join(base.Dir, rootfs.BaseSDBoot),
		grubBoot: filepath.Join(base.Dir, rootfs.BaseGrubBoot), grubCore: filepath.Join(base.Dir, rootfs.BaseGrubCore),
		grubHybrid: filepath.Join(base.Dir, rootfs.BaseGrubBootHybrid), grubCDCore: filepath.Join(base.Dir, rootfs.BaseGrubCDCore),
		kernelVersion: base.KernelVersion(),
	}
	boot.initrd, err = step(st, "initramfs", func() (string, string, error) {
		return buildInitramfs(ctx, opt.Cache, base, in.Init, s.Kernel.Modules)
	})
	if err != nil {
		return nil, err
	}
	comps, err := step(st, "components (go build)", func() (components, string, error) {
		return buildComponents(ctx, opt.Cache, s, opt.Log)
	})
	if err != nil {
		return nil, err
	}
	man.Components = comps.manifest
	bundles, err := step(st, "bundles (OCI layout)", func() (*bundleLayout, string, error) {
		return buildBundles(ctx, opt.Cache, s, bundleOptions(opt, epoch))
	})
	if err != nil {
		return nil, err
	}
	if bundles != nil {
		man.Bundle = bundles.manifest
	}
	sbomFile := filepath.Join(opt.OutDir, sbom.FileName)
	if _, err := step(st, "SBOM (CycloneDX)", func() (struct{}, string, error) {
		n, err := writeSBOM(sbomFile, s, man)
		return struct{}{}, fmt.Sprintf("%d components", n), err
	}); err != nil {
		return nil, err
	}
	slots, err := step(st, "slot images (mksquashfs)", func() (map[layout.Slot]string, string, error) {
		return buildSlots(ctx, opt.Cache, s, slotInputs(s, in.Firstboot, base, boot.kernelVersion, bundles, comps.programs), opt.Log)
	})
	if err != nil {
		return nil, err
	}
	signed, err := step(st, "Secure Boot (UKIs, signatures)", func() (*signedBoot, string, error) {
		if !s.SecureBootOn() {
			return nil, "(no secureBoot)", nil
		}
		sb, err := signBoot(ctx, s, base, boot, slots, work)
		if err != nil {
			return nil, "", err
		}
		man.SecureBoot = sb.manifest
		return sb, sb.note(), nil
	})
	if err != nil {
		return nil, err
	}
	espImg := filepath.Join(work, "esp.img")
	if _, err := step(st, "EFI system partition", func() (struct{}, string, error) {
		c, err := espContents(s, boot, slots, signed)
		if err != nil {
			return struct{}{}, "", err
		}
		return struct{}{}, "", esp.Write(ctx, espImg, s.Disk.ESPSizeMiB*layout.MiB, c, epoch)
	}); err != nil {
		return nil, err
	}
	disk, err := step(st, "raw disk image", func() (rawDisk, string, error) {
		d, err := writeRaw(ctx, out(spec.OutputRaw), s, espImg, slots, boot)
		return d, "", err
	})
	if err != nil {
		return nil, err
	}
	man.addPartitions(disk.placed)
	if _, err := step(st, "qcow2 image", func() (struct{}, string, error) {
		if !s.WantsOutput(spec.OutputQCOW2) {
			return struct{}{}, "(not requested)", nil
		}
		return struct{}{}, "", diskimage.ConvertQCOW2(ctx, disk.path, out(spec.OutputQCOW2))
	}); err != nil {
		return nil, err
	}
	vmdkImg, err := step(st, "vmdk image (streamOptimized)", func() (vmdkImage, string, error) {
		if !s.WantsOutput(spec.OutputVMDK) && !s.WantsOutput(spec.OutputOVA) {
			return vmdkImage{}, "(not requested)", nil
		}
		dst := out(spec.OutputVMDK)
		if !s.WantsOutput(spec.OutputVMDK) { // only the OVA's content
			dst = filepath.Join(work, s.Name+".vmdk")
		}
		img, err := writeVMDK(ctx, disk.path, dst, s.Name+".vmdk", opt.Log)
		return img, fmt.Sprintf("%.1f MiB", float64(img.stats.Size)/(1<<20)), err
	})
	if err != nil {
		return nil, err
	}
	if _, err := step(st, "ova (vSphere)", func() (struct{}, string, error) {
		if !s.WantsOutput(spec.OutputOVA) {
			return struct{}{}, "(not requested)", nil
		}
		if err := writeOVA(ctx, ovaInputs{
			name: s.Name, version: s.Version, disk: vmdkImg, hardwareVersion: s.VSphere.HardwareVersion, epoch: epoch,
		}, out(spec.OutputOVA)); err != nil {
			return struct{}{}, "", err
		}
		if !s.WantsOutput(spec.OutputVMDK) { // the OVA holds it now: free the disk for the ISO
			return struct{}{}, "", os.Remove(vmdkImg.path)
		}
		return struct{}{}, "", nil
	}); err != nil {
		return nil, err
	}
	if _, err := step(st, "iso (hybrid)", func() (struct{}, string, error) {
		if !s.WantsOutput(spec.OutputISO) {
			return struct{}{}, "(not requested)", nil
		}
		contents := isoContents(s, boot, signed)
		note, err := writeISO(ctx, work, out(spec.OutputISO), isoInputs{
			esp: contents, bios: isoBIOS(contents, boot, signed), release: releaseOf(s, boot.kernelVersion, s.Faults),
			disk: disk, slot: slots[layout.SlotA], epoch: epoch,
		})
		return struct{}{}, note, err
	}); err != nil {
		return nil, err
	}
	if _, err := step(st, "upgrade file", func() (struct{}, string, error) {
		if s.Upgrade.SigningKey == "" {
			return struct{}{}, "(no upgrade.signingKey)", nil
		}
		dst := filepath.Join(opt.OutDir, UpgradeFileName(s.Name, s.Version))
		m, err := writeUpgradeFile(ctx, upgradeInputs{
			name: s.Name, version: s.Version, minFrom: s.Upgrade.MinFromVersion,
			builtAt: epoch.UTC().Format(upgrade.BuiltAtLayout),
			rootfs:  slots[layout.SlotA], kernel: boot.kernel, initrd: boot.initrd,
			images: bundles.imageNames(), sbom: sbomFile, key: s.Resolve(s.Upgrade.SigningKey),
			ukis: signed.slotUKIs(),
		}, dst)
		if err != nil {
			return struct{}{}, "", err
		}
		return struct{}{}, fmt.Sprintf("%s (%d parts)", filepath.Base(dst), len(m.Parts)), man.addOutput("upgrade", dst)
	}); err != nil {
		return nil, err
	}
	if _, err := step(st, "manifest", func() (struct{}, string, error) {
		for _, f := range s.Outputs {
			if err := man.addOutput(f, out(f)); err != nil {
				return struct{}{}, "", err
			}
		}
		if err := man.addOutput("sbom", sbomFile); err != nil {
			return struct{}{}, "", err
		}
		if !s.WantsOutput(spec.OutputRaw) { // raw is the intermediate of every other format
			if err := os.Remove(disk.path); err != nil {
				return struct{}{}, "", err
			}
		}
		return struct{}{}, "", man.write(filepath.Join(opt.OutDir, "manifest.json"))
	}); err != nil {
		return nil, err
	}
	if _, err := step(st, "cache", func() (struct{}, string, error) {
		return struct{}{}, pruneCache(opt), nil
	}); err != nil {
		return nil, err
	}
	return &Result{Manifest: man, Map: diskimage.Draw(disk.placed, disk.size)}, nil
}

// pruneCache bounds the cache after a build and says what it did. The
// image is built, so a failure to prune is only logged.
func pruneCache(opt Options) string {
	if opt.CacheMax <= 0 {
		return "(no bound)"
	}
	res, err := opt.Cache.Prune(opt.CacheMax, cache.DefaultGrace, bundle.CacheSources()...)
	if err != nil {
		opt.Log.Warn("cache: pruning failed, the image is built", "cache", opt.Cache.Root(), "err", err)
		return "pruning failed: " + err.Error()
	}
	note := fmt.Sprintf("%d entries, %.1f GiB", res.Kept, float64(res.KeptBytes)/(1<<30))
	if len(res.Removed) > 0 {
		note += fmt.Sprintf("; removed %d least recently used (%.1f GiB)", len(res.Removed), float64(res.RemovedBytes)/(1<<30))
	}
	return note
}

func cachedNote(cached bool) string {
	if cached {
		return "(cached)"
	}
	return ""
}

// bootFiles are the files that boot a slot: from the rootfs base, and the
// initramfs.
type bootFiles struct {
	kernel, sdboot, initrd string
	// grubBoot and grubCore are GRUB's MBR boot code and its disk core
	// image, for BIOS boot (package biosboot); grubHybrid and grubCDCore
	// the hybrid ISO's.
	grubBoot, grubCore     string
	grubHybrid, grubCDCore string
	kernelVersion          string
}

// buildInitramfs returns the initramfs of base's kernel with the init
// program and the modules (the default set when none), cached by them.
func buildInitramfs(ctx context.Context, c *cache.Cache, base *rootfs.Base, init string, mods []string) (string, string, error) {
	if len(mods) == 0 {
		mods = initramfs.DefaultModules()
	}
	key, err := cache.NewKey("initramfs/v1").String("base", base.Key).
		File("init", init).Strings("modules", mods).Sum()
	if err != nil {
		return "", "", err
	}
	dir, cached, err := c.Fill(ctx, "initramfs", key, func(ctx context.Context, dir string) error {
		f, err := os.Create(filepath.Join(dir, "initrd.img"))
		if err != nil {
			return err
		}
		defer f.Close()
		err = initramfs.Write(f, initramfs.Inputs{
			Init: init, Busybox: filepath.Join(base.Dir, rootfs.BaseBusybox),
			ModulesDir: filepath.Join(base.Dir, rootfs.BaseModules), Modules: mods,
		})
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "initrd.img"), cachedNote(cached), nil
}

// releaseOf is the release.json of a build of s with these faults.
func releaseOf(s *spec.Spec, kernelVersion string, faults []string) release.Release {
	return release.Release{
		Name: s.Name, Version: s.Version, Suite: s.OS.Suite,
		KernelVersion: kernelVersion, BuiltAt: s.Epoch().Format("2006-01-02T15:04:05Z"),
		Faults: faults, BootTries: s.Boot.Tries,
	}
}

// slotInputs is what slot A holds: the base, the overlay, firstboot, the
// release, the enabled units, the programs, the bundle and the keys
// trusted for upgrades (whose problems Parse reported already).
func slotInputs(s *spec.Spec, firstboot string, base *rootfs.Base, kernelVersion string, bundles *bundleLayout, programs []rootfs.Program) rootfs.SlotInputs {
	in := rootfs.SlotInputs{
		Base: base, Overlay: s.Resolve(s.OS.Overlay), Firstboot: firstboot,
		Release: releaseOf(s, kernelVersion, s.Faults), Enable: s.OS.Enable, Programs: programs,
	}
	if bundles != nil {
		in.BundleDir, in.BundleKey = bundles.dir, bundles.key
	}
	return in
}

// buildSlots returns the slot images: slot A from in, and with slotB.mode
// copy the same with slot B's faults.
func buildSlots(ctx context.Context, c *cache.Cache, s *spec.Spec, in rootfs.SlotInputs, log *slog.Logger) (map[layout.Slot]string, string, error) {
	keys, err := s.UpgradeKeys()
	if err != nil {
		return nil, "", fmt.Errorf("upgrade keys: %w", err)
	}
	for _, k := range keys {
		in.UpgradeKeys = append(in.UpgradeKeys, k.String())
	}
	slots := map[layout.Slot]string{}
	a, cached, err := rootfs.BuildSlot(ctx, c, in, s.Epoch(), log)
	if err != nil {
		return nil, "", fmt.Errorf("slot A: %w", err)
	}
	slots[layout.SlotA] = a
	if s.SlotB.Mode == spec.SlotCopy {
		in.Release.Faults = s.SlotB.Faults
		b, bc, err := rootfs.BuildSlot(ctx, c, in, s.Epoch(), log)
		if err != nil {
			return nil, "", fmt.Errorf("slot B: %w", err)
		}
		slots[layout.SlotB] = b
		cached = cached && bc
	}
	return slots, cachedNote(cached), nil
}

// espContents is the disk image's ESP: an entry per slot image, with boot
// counting, the preferred slot first; with signed, systemd-boot and each
// slot's UKI signed, and the enrollment files; without, GRUB's
// configuration and environment block for BIOS boot too.
func espContents(s *spec.Spec, boot bootFiles, slots map[layout.Slot]string, signed *signedBoot) (esp.Contents, error) {
	c := esp.Contents{SystemdBoot: boot.sdboot, TimeoutSeconds: s.Boot.TimeoutSeconds}
	def := layout.Slot(s.Boot.Default)
	if signed != nil {
		c.SystemdBoot, c.EnrollKeys, c.SecureBootEnroll = signed.sdboot, signed.enrollKeys, s.SecureBoot.Enroll
	} else {
		var err error
		c.GrubConfig, err = biosboot.Config{TimeoutSeconds: s.Boot.TimeoutSeconds, Default: def, Cmdline: s.Kernel.Cmdline}.GrubCfg()
		if err != nil {
			return c, err
		}
		if c.GrubEnv, err = biosboot.InitialEnv(def); err != nil {
			return c, err
		}
	}
	for _, slot := range layout.Slots() {
		if _, ok := slots[slot]; !ok {
			continue
		}
		sortKey := "terrarium-2"
		if slot == def {
			sortKey = "terrarium-1"
		}
		c.Entries = append(c.Entries, esp.Entry{
			Slot: slot, Title: fmt.Sprintf("Terrarium %s (slot %s)", s.Version, slot),
			Version: s.Version, Kernel: boot.kernel, Initrd: boot.initrd,
			Cmdline: s.Kernel.Cmdline, Tries: s.Boot.Tries, SortKey: sortKey,
		})
		if signed != nil {
			c.Entries[len(c.Entries)-1].UKI = signed.ukis[slot]
		}
	}
	return c, nil
}

// installGrub writes GRUB's boot code and core image into the raw image
// at path, whose BIOS boot partition is p.
func installGrub(path string, p diskimage.Placed, boot bootFiles) error {
	bootImg, err := os.ReadFile(boot.grubBoot)
	if err != nil {
		return fmt.Errorf("GRUB for BIOS boot (the base's grub-pc-bin): %w", err)
	}
	core, err := os.ReadFile(boot.grubCore)
	if err != nil {
		return fmt.Errorf("GRUB for BIOS boot (the base's grub-mkimage): %w", err)
	}
	if err := biosboot.Install(path, p.Start, p.Size, bootImg, core); err != nil {
		return fmt.Errorf("GRUB for BIOS boot: %w", err)
	}
	return nil
}

// rawDisk is the raw image the raw stage wrote.
type rawDisk struct {
	path   string
	placed []diskimage.Placed
	size   int64
}

// diskPartitions are the raw image's partitions: the ESP, GRUB's BIOS
// boot partition unless the image boots only under Secure Boot, and the
// two slots (slot B empty unless it has an image).
func diskPartitions(s *spec.Spec, espImg string, slots map[layout.Slot]string) []diskimage.Partition {
	slotSize := s.Disk.SlotSizeMiB * layout.MiB
	parts := []diskimage.Partition{{Label: layout.LabelESP, Type: layout.TypeESP, Size: s.Disk.ESPSizeMiB * layout.MiB, Source: espImg}}
	if !s.SecureBootOn() {
		parts = append(parts, diskimage.Partition{Label: layout.LabelBIOSBoot, Type: layout.TypeBIOSBoot, Size: layout.BIOSBootSize})
	}
	return append(parts,
		diskimage.Partition{Label: layout.LabelSlotA, Type: layout.TypeRootX86_64, Size: slotSize, Source: slots[layout.SlotA]},
		diskimage.Partition{Label: layout.LabelSlotB, Type: layout.TypeRootX86_64, Size: slotSize, Source: slots[layout.SlotB]},
	)
}

// writeRaw writes the raw disk image to dst, with GRUB's boot code and
// core image when it has a BIOS boot partition.
func writeRaw(ctx context.Context, dst string, s *spec.Spec, espImg string, slots map[layout.Slot]string, boot bootFiles) (rawDisk, error) {
	id := s.Name + "/" + s.Version
	parts := diskPartitions(s, espImg, slots)
	placed, err := diskimage.WriteRawThen(ctx, dst, id, parts, func(path string, placed []diskimage.Placed) error {
		for _, p := range placed {
			if p.Label == layout.LabelBIOSBoot {
				return installGrub(path, p, boot)
			}
		}
		return nil
	})
	if err != nil {
		return rawDisk{}, err
	}
	_, size := diskimage.Plan(id, parts)
	return rawDisk{path: dst, placed: placed, size: size}, nil
}
