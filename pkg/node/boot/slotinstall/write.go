package slotinstall

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/readahead"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/bootloader"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// unbootable removes the target's entries (staged ones too) and the
// leftovers of an interrupted install, durably; then, on an image that also boots under
// BIOS, records in GRUB's environment block that the target is the slot
// last installed: with no entry yet it cannot boot, and once its entry
// is written GRUB tries it first, as systemd-boot does by its sort key.
func (in *installer) unbootable(dir string, st espState) error {
	in.res.Changed = true // from the first removal on
	for _, e := range append(st.target, st.staged...) {
		if err := in.w.remove(espPath(dir, e.path())); err != nil {
			return fmt.Errorf("remove %s: %w", e.path(), err)
		}
	}
	for _, f := range st.leftovers {
		if err := in.w.remove(espPath(dir, f)); err != nil {
			return fmt.Errorf("remove %s: %w", f, err)
		}
	}
	if err := in.w.syncDir(espPath(dir, layout.ESPEntriesDir)); err != nil {
		return err
	}
	if err := in.w.check("write " + layout.ESPGrubEnv); err != nil {
		return err
	}
	if err := bootloader.PreferGrub(dir, in.target); err != nil {
		return fmt.Errorf("GRUB's environment block: %w", err)
	}
	return nil
}

// writeRootfs copies the rootfs into the target's partition, syncs it,
// and reads it back. The copy is not hashed on its way: the read-back,
// hashed against the signed manifest, checks what the slot holds once,
// whether the upgrade file changed after it was verified or the disk lost
// a write (a hash on the way too would cost a third of the install's time
// under emulation and check nothing the read-back does not). Only when
// the read-back differs is the file's part hashed again, to tell the two
// apart.
func (in *installer) writeRootfs(ctx context.Context, dev SlotDevice) error {
	dw, pw := in.rootfsWriter(dev)
	part, _, err := in.o.Upgrade.Part(in.rootfs.Name)
	if err != nil {
		return err
	}
	n, err := readahead.Copy(ctx, pw, part)
	if dw.err != nil {
		return dw.err
	}
	if err != nil {
		return fmt.Errorf("copy %s into %s: %w", in.rootfs.Name, dev.Name(), err)
	}
	if err := in.written(dev, pw, n); err != nil {
		return err
	}
	in.o.Reporter.Report(reportStep, step.Writing, "rootfs written; reading it back")
	sum, err := readBackSHA256(ctx, dev, in.rootfs.Size)
	if err != nil {
		return err
	}
	if sum != in.rootfs.SHA256 {
		if err := in.o.Upgrade.CopyPart(ctx, io.Discard, in.rootfs.Name); err != nil {
			return fmt.Errorf("%s holds other bytes than the manifest's %s: %w", dev.Name(), in.rootfs.Name, err)
		}
		return fmt.Errorf("%s: its first %d bytes have sha256 %s after writing %s: %w", dev.Name(), in.rootfs.Size, sum, in.rootfs.SHA256, ErrReadBack)
	}
	return nil
}

// rootfsWriter writes the rootfs into dev from its start, reporting the
// progress.
func (in *installer) rootfsWriter(dev SlotDevice) (*deviceWriter, *progressWriter) {
	in.res.Device = dev.Name()
	dw := &deviceWriter{dev: dev, o: in.w}
	return dw, &progressWriter{w: dw, total: in.rootfs.Size, clock: in.o.Clock, report: in.o.Reporter, last: in.o.Clock.Now()}
}

// written checks that n bytes, all of the rootfs, went into dev, and
// syncs it, dropping its cache so that the read-back reads the disk.
func (in *installer) written(dev SlotDevice, pw *progressWriter, n int64) error {
	if n != in.rootfs.Size {
		return fmt.Errorf("copy %s into %s: %d of its %d bytes: %w", in.rootfs.Name, dev.Name(), n, in.rootfs.Size, upgrade.ErrTruncated)
	}
	pw.done()
	if err := in.w.check("sync " + dev.Name()); err != nil {
		return err
	}
	if err := dev.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dev.Name(), err)
	}
	return nil
}

// writeESP writes the kernel and the initramfs, then the entry: the
// commit; or, under Options.Stage, the staged entry, which Arm commits.
func (in *installer) writeESP(ctx context.Context, dir string, p plan) error {
	for _, f := range in.espFiles() {
		if err := in.writePart(ctx, dir, f.path, f.part); err != nil {
			return fmt.Errorf("write %s on the ESP: %w", f.path, err)
		}
		in.res.Files = append(in.res.Files, f.path)
	}
	entries := espPath(dir, layout.ESPEntriesDir)
	final := filepath.Join(entries, p.file)
	if in.o.Stage {
		final += stagedSuffix
	}
	tmp := final + tempSuffix
	data := p.entry.render()
	err := in.w.writeFile(tmp, func(w io.Writer) error { _, err := w.Write(data); return err })
	if err == nil {
		err = in.w.rename(tmp, final)
	}
	if err == nil {
		err = in.w.syncDir(entries)
	}
	if err != nil {
		return fmt.Errorf("write the boot entry %s: %w", in.res.Entry, err)
	}
	in.res.Files = append(in.res.Files, in.res.Entry)
	return nil
}

// writePart writes a part to the ESP path p: to p.new, checked by reading
// it back; then the old p is removed and p.new renamed to p (FAT renames
// over an existing file are not atomic, so there is none to rename over).
func (in *installer) writePart(ctx context.Context, dir, p string, part upgrade.PartInfo) error {
	final := espPath(dir, p)
	tmp := final + tempSuffix
	if err := in.w.mkdirAll(filepath.Dir(final)); err != nil {
		return err
	}
	// The old file goes first: the slot has no entry that uses it, and the
	// ESP may have room for one copy only.
	for _, f := range []string{tmp, final} {
		if err := in.w.remove(f); err != nil {
			return err
		}
	}
	err := in.w.writeFile(tmp, func(w io.Writer) error { return in.o.Upgrade.CopyPart(ctx, w, part.Name) })
	if err != nil {
		return err
	}
	sum, err := fileSHA256(ctx, tmp)
	if err != nil {
		return err
	}
	if sum != part.SHA256 {
		return fmt.Errorf("%s has sha256 %s after writing %s: %w", tmp, sum, part.SHA256, ErrReadBack)
	}
	if err := in.w.rename(tmp, final); err != nil {
		return err
	}
	return in.w.syncDir(filepath.Dir(final))
}

// progressWriter reports how much of the rootfs was written, at most
// every progressEvery.
type progressWriter struct {
	w       io.Writer
	total   int64
	written int64
	clock   host.Clock
	report  host.Reporter
	last    time.Time
	percent int64
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.written += int64(n)
	if pc := p.written * 100 / max(p.total, 1); pc != p.percent {
		if now := p.clock.Now(); now.Sub(p.last) >= progressEvery {
			p.percent, p.last = pc, now
			p.report.Report(reportStep, step.Writing, fmt.Sprintf("rootfs %d%%", pc))
		}
	}
	return n, err
}

// done reports 100% once.
func (p *progressWriter) done() {
	if p.percent != 100 {
		p.percent = 100
		p.report.Report(reportStep, step.Writing, "rootfs 100%")
	}
}
