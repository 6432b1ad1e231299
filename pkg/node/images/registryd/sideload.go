package registryd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"

	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
	"golang.org/x/sys/unix"
)

// Labels of a side-load disk: exFAT and ISO 9660 hold the full name, FAT
// truncates it to 11 characters.
var bundleLabels = []string{layout.LabelBundle, layout.LabelBundleFAT}

// sideloader is what the side-loader needs of the cache.
type sideloader interface {
	Sideload(ctx context.Context, dir string, opts ...registry.AddOption) (registry.Sideloaded, error)
}

var _ sideloader = (*registry.Cache)(nil)

// SideLoader adds bundles from disks labelled TERRA-BUNDLE, attached at
// boot or later, to the node's cache.
type SideLoader struct {
	LabelDir string // /dev/disk/by-label
	MountDir string // a private mount point
	Console  io.Writer
	Log      *slog.Logger
	Interval time.Duration
	// RequireSigned takes only bundles signed for bundles by one of Keys
	// (the keys the node trusts for bundles): the node trusts a key.
	// Without it bundles are taken unsigned, and the console says so; they
	// cannot replace a tag the node has.
	RequireSigned bool
	Keys          []signature.PublicKey
	// Reserve is the free space a side-load leaves on the cache's file
	// system (TERRA-STATE) for etcd; Space measures it (nil: statfs).
	Reserve uint64
	Space   diskspace.FS
	// Record is the side-load log (layout.RegistrySideloadLog), one
	// SideloadRecord a line for each disk; "": none is kept.
	Record string
	// Now is the clock of the log's records (nil: time.Now).
	Now func() time.Time

	// predatesTrust: registry.json is an older firstboot's (Run).
	predatesTrust bool
	// mount and unmount default to mountReadOnly and umount(2); tests
	// replace them.
	mount   func(dev, dir string) error
	unmount func(dir string) error
}

// Watch polls for bundle disks until ctx ends. Each disk (by device, size
// and the kernel's sequence number) is loaded once per insertion: a
// refused disk is reported once, and the registry keeps serving (nothing
// of it was added).
func (s *SideLoader) Watch(ctx context.Context, cache sideloader) {
	done := map[string]bool{}
	for {
		for _, label := range bundleLabels {
			dev := filepath.Join(s.LabelDir, label)
			id := diskID(dev)
			if id == "" || done[id] {
				continue
			}
			done[id] = true
			s.take(ctx, dev, cache)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.Interval):
		}
	}
}

// take side-loads the disk dev once: it adds its bundle to the cache or
// refuses it, says which on the console and records it in the log.
func (s *SideLoader) take(ctx context.Context, dev string, cache sideloader) {
	res, err := s.load(ctx, dev, cache)
	s.record(dev, res, err)
	if err != nil {
		s.say("bundle disk %s refused, nothing was added to the cache (the registry keeps serving): %v", dev, err)
		return
	}
	if !res.Signed {
		s.say("this node trusts no key: took an UNSIGNED bundle from %s; add a key trusted for bundles to trustedKeys to require signatures", dev)
	}
	for _, r := range res.Replaced {
		s.say("bundle disk %s replaced %s: it was %s, now %s (the bundle is signed by key %s and says it replaces it, at generation %d)",
			dev, r.Ref, r.Old, r.New, res.Signer.ID(), r.Generation)
	}
	signed := ""
	if res.Signed {
		signed = " (signed by key " + res.Signer.ID() + ")"
	}
	s.say("bundle disk %s added %d images to the cache%s: %v", dev, len(res.Added), signed, res.Added)
}

func diskID(dev string) string {
	target, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return ""
	}
	f, err := os.Open(target)
	if err != nil {
		return ""
	}
	defer f.Close()
	size, _ := f.Seek(0, io.SeekEnd)
	// The disk's sequence number tells a disk from the next one under the
	// same name and of the same size.
	return fmt.Sprintf("%s:%d#%s", target, size, media.DiskSeq("/", target))
}

func (s *SideLoader) say(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.Log.Info("registry: " + msg)
	if s.Console != nil {
		_, _ = fmt.Fprintf(s.Console, "terrarium: %s\n", msg) // the log above keeps it
	}
}

// load mounts dev and adds its layout to the cache. A panic on the
// disk's content is an error too: the service must not restart into the
// same disk.
func (s *SideLoader) load(ctx context.Context, dev string, cache sideloader) (res registry.Sideloaded, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = registry.Sideloaded{}, fmt.Errorf("internal error while reading the disk (please report it): %v", r)
		}
	}()
	if err := os.MkdirAll(s.MountDir, 0o700); err != nil {
		return res, err
	}
	mount, unmount := s.mount, s.unmount
	if mount == nil {
		mount = mountReadOnly
	}
	if unmount == nil {
		unmount = func(dir string) error { return unix.Unmount(dir, 0) }
	}
	if err := mount(dev, s.MountDir); err != nil {
		return res, err
	}
	defer func() {
		if err := unmount(s.MountDir); err != nil {
			s.Log.Warn("registry: unmount bundle disk", "dir", s.MountDir, "err", err)
		}
	}()
	// Sideload refuses a layout directory that is a symlink, so a
	// "bundle" linking out of the disk goes no further.
	root := s.MountDir
	if _, err := os.Lstat(filepath.Join(root, "oci-layout")); err != nil {
		root = filepath.Join(s.MountDir, "bundle")
		if _, err := os.Lstat(filepath.Join(root, "oci-layout")); err != nil {
			return res, fmt.Errorf("no OCI layout at / or /bundle (make the disk with 'imagebuild bundle disk')")
		}
	}
	s.say("verifying bundle disk %s", dev)
	opts := []registry.AddOption{registry.WithSpace(s.Space, s.Reserve)}
	if s.RequireSigned {
		opts = append(opts, registry.SignedBy(s.Keys))
	}
	res, err = cache.Sideload(ctx, root, opts...)
	if err != nil {
		if s.predatesTrust && errors.Is(err, registry.ErrSideloadUnsigned) {
			err = fmt.Errorf("%w (the registry's configuration was written by an older firstboot, so it takes only bundles signed by its keys until firstboot rewrites it and restarts the registry, which then reads the disk again)", err)
		}
		return res, err
	}
	return res, nil
}

// mountReadOnly mounts the side-load disk dev (its link by label) on dir
// as media allows a medium that is only read: FAT, exFAT or ISO 9660, as
// its first bytes show, read-only, nodev, nosuid, noexec.
func mountReadOnly(dev, dir string) error {
	target, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return err
	}
	_, err = media.Mount(target, media.Medium{Device: target, Label: filepath.Base(dev)}, dir, media.Read)
	return err
}
