// Package ova writes an OVA for vSphere: a tar of an OVF 1.x descriptor,
// its manifest and a streamOptimized VMDK (see pkg/image/vmdk), in that
// order, as vCenter, ESXi and ovftool require.
//
// The descriptor describes one EFI VM with VMware's usual devices (a SATA
// disk, a CD-ROM drive, a vmxnet3 NIC), a configurable virtual hardware
// version, and a ProductSection of user-configurable vApp properties: the
// machine config and the settings a vSphere admin types by hand, which the
// node reads from the OVF environment. The tar is ustar with fixed times,
// owners and modes: the same inputs give the same bytes.
//
// What VMware's tools have refused in other projects' OVAs, and this
// package does instead:
//   - the .ovf is the first member (ovftool and Workstation insist,
//     osbuild/image-builder#431), the manifest the second;
//   - manifest lines are exactly "SHA256(name)= hex": "SHA256 (name) = hex"
//     is an "invalid OVF checksum algorithm" (home-assistant/operating-
//     system#826), and SHA1 is refused by vSphere 7 and later;
//   - the file size in References is the VMDK file's, not the disk's
//     (delphix/appliance-build#732);
//   - the disk's capacity is in bytes with capacityAllocationUnits
//     "byte" (a wrong unit made Talos 1.5.0 ask for 8192 TB, #7627).
package ova

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DefaultHardwareVersion is vmx-13, which ESXi 6.5 and every later
// release run.
const DefaultHardwareVersion = 13

// hardwareVersions lists the supported virtual hardware versions with the
// first ESXi release that runs each. vmx-12 and vmx-16 are Workstation's
// and Fusion's only.
func hardwareVersions() []struct {
	version int
	esxi    string
} {
	return []struct {
		version int
		esxi    string
	}{
		{13, "6.5"}, {14, "6.7"}, {15, "6.7 U2"}, {17, "7.0"}, {18, "7.0 U1"},
		{19, "7.0 U2"}, {20, "8.0"}, {21, "8.0 U2"}, {22, "9.0"},
	}
}

// CheckHardwareVersion returns nil when vmx-v is a supported virtual
// hardware version, and an error wrapping ErrHardwareVersion that lists
// them otherwise.
func CheckHardwareVersion(v int) error {
	var known []string
	for _, h := range hardwareVersions() {
		if h.version == v {
			return nil
		}
		known = append(known, fmt.Sprintf("%d (ESXi %s)", h.version, h.esxi))
	}
	return fmt.Errorf("%w: %d; use one of %s", ErrHardwareVersion, v, strings.Join(known, ", "))
}

// Disk is the streamOptimized VMDK an OVA carries.
type Disk struct {
	// Content is the VMDK file, Size bytes long.
	Content io.ReaderAt
	Size    int64
	// Capacity is the virtual disk's size in bytes.
	Capacity int64
	// Populated is the bytes the disk holds that are not zero (optional):
	// vSphere's estimate of the space a thin disk takes.
	Populated int64
}

// maxMember is the largest member a ustar header's 11 octal digits hold.
const maxMember = 1<<33 - 1

// Option configures Write.
type Option func(*options) error

type options struct {
	hardwareVersion int
	cpus            int
	memoryMiB       int
	version         string
	modTime         time.Time
}

// WithHardwareVersion sets the virtual hardware version, vmx-v (default
// DefaultHardwareVersion): the oldest ESXi that can run the VM.
func WithHardwareVersion(v int) Option {
	return func(o *options) error {
		if err := CheckHardwareVersion(v); err != nil {
			return err
		}
		o.hardwareVersion = v
		return nil
	}
}

// WithCPUs sets the number of virtual CPUs (default 2, kubeadm's minimum).
func WithCPUs(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 768 {
			return fmt.Errorf("%w: %d CPUs (1 to 768)", ErrOption, n)
		}
		o.cpus = n
		return nil
	}
}

// WithMemoryMiB sets the memory size (default 4096 MiB); vSphere wants a
// multiple of 4 MiB.
func WithMemoryMiB(n int) Option {
	return func(o *options) error {
		if n < 1024 || n%4 != 0 {
			return fmt.Errorf("%w: %d MiB of memory (a multiple of 4, at least 1024)", ErrOption, n)
		}
		o.memoryMiB = n
		return nil
	}
}

// WithVersion sets the product version the descriptor shows (default
// none).
func WithVersion(v string) Option {
	return func(o *options) error {
		o.version = v
		return nil
	}
}

// WithModTime sets the time of every file in the tar (default the Unix
// epoch); a build passes its SOURCE_DATE_EPOCH.
func WithModTime(t time.Time) Option {
	return func(o *options) error {
		if t.Unix() < 0 || t.Unix() > maxMember {
			return fmt.Errorf("%w: time %s is outside what ustar records", ErrOption, t)
		}
		o.modTime = t.UTC()
		return nil
	}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Write writes an OVA of a VM called name to w: name.ovf, name.mf and
// name.vmdk, whose content is disk. disk.Content is read twice, to hash it
// for the manifest and to copy it.
func Write(ctx context.Context, w io.Writer, name string, disk Disk, opts ...Option) error {
	o := options{hardwareVersion: DefaultHardwareVersion, cpus: 2, memoryMiB: 4096, modTime: time.Unix(0, 0).UTC()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return err
		}
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q (letters, digits, '.', '_', '-'; at most 63)", ErrName, name)
	}
	if disk.Content == nil || disk.Size <= 0 || disk.Capacity <= 0 || disk.Populated < 0 {
		return fmt.Errorf("%w: content, size %d and capacity %d are required", ErrDisk, disk.Size, disk.Capacity)
	}
	if disk.Size > maxMember {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, disk.Size)
	}
	diskSum, err := hashDisk(ctx, disk)
	if err != nil {
		return err
	}
	ovf, err := descriptor(name, disk, o)
	if err != nil {
		return err
	}
	ovfSum := sha256.Sum256(ovf)
	mf := manifest([]manifestEntry{{name + ".ovf", hex.EncodeToString(ovfSum[:])}, {name + ".vmdk", diskSum}})

	tw := tar.NewWriter(w)
	for _, m := range []struct {
		name string
		r    io.Reader
		size int64
	}{
		{name + ".ovf", bytes.NewReader(ovf), int64(len(ovf))},
		{name + ".mf", strings.NewReader(mf), int64(len(mf))},
		{name + ".vmdk", io.NewSectionReader(disk.Content, 0, disk.Size), disk.Size},
	} {
		if err := addMember(ctx, tw, m.name, m.r, m.size, o.modTime); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish OVA: %w", err)
	}
	return nil
}

// descriptor returns the .ovf file.
func descriptor(name string, disk Disk, o options) ([]byte, error) {
	b, err := xml.MarshalIndent(newEnvelope(name, disk, o), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal OVF descriptor: %w", err)
	}
	return slices.Concat([]byte(xml.Header), b, []byte("\n")), nil
}

type manifestEntry struct{ file, sha256 string }

// manifest returns the .mf file: exactly "SHA256(name)= hex" per file.
func manifest(entries []manifestEntry) string {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "SHA256(%s)= %s\n", e.file, e.sha256)
	}
	return b.String()
}

func hashDisk(ctx context.Context, disk Disk) (string, error) {
	h := sha256.New()
	if err := copyAll(ctx, h, io.NewSectionReader(disk.Content, 0, disk.Size), disk.Size); err != nil {
		return "", fmt.Errorf("hash the disk for the manifest: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// addMember writes one ustar member: root's, mode 0644, at modTime.
func addMember(ctx context.Context, tw *tar.Writer, name string, r io.Reader, size int64, modTime time.Time) error {
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644,
		ModTime: modTime, Format: tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("add %s to the OVA: %w", name, err)
	}
	if err := copyAll(ctx, tw, r, size); err != nil {
		return fmt.Errorf("add %s to the OVA: %w", name, err)
	}
	return nil
}

// copyAll copies exactly size bytes from r to w, 4 MiB at a time, and
// stops when ctx is done.
func copyAll(ctx context.Context, w io.Writer, r io.Reader, size int64) error {
	buf := make([]byte, min(size, 4<<20))
	for done := int64(0); done < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-done)])
		if err != nil {
			return fmt.Errorf("read at byte %d of %d: %w", done+int64(n), size, err)
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		done += int64(n)
	}
	return nil
}
