package registryd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// OtherSlot serves the bundle of the slot the node did not boot, behind
// the booted slot's own, while a marker names that slot:
//
//   - On an upgrade's trial boot (layout.RunTrialBoot), the slot the boot
//     falls back to. Until `kubeadm upgrade` has moved the node, its static
//     pods name the old Kubernetes, whose images only the old slot carries.
//     containerd normally still holds them; but a trial boot cut short (its
//     power lost) starts containerd from an empty store
//     (pkg/node/images/unpackwindow), and without the old slot's images the
//     old control plane, which the upgrade needs running, could not start
//     again. The initramfs writes the marker; firstboot removes it when it
//     blesses the boot.
//   - While the node runs the Kubernetes of an upgrade staged in the other
//     slot in place, without a reboot (layout.RunInPlaceSlot, package
//     inplace): the new Kubernetes' images are that slot's. firstboot writes
//     the marker; it lasts until the next boot.
//
// When no marker names a slot any more, the registry unmounts the slot,
// which the next upgrade may then write.
type OtherSlot struct {
	Markers     []string      // layout.RunTrialBoot, layout.RunInPlaceSlot
	ByPartLabel string        // where partitions' links are, by label
	MountDir    string        // layout.RegistryPreviousSlotDir
	Interval    time.Duration // how often the markers are looked at
	Log         *slog.Logger
	// Mount mounts a slot read-only (slotmount.Mount).
	Mount func(ctx context.Context, byPartLabel string, slot layout.Slot, mnt string) (unmount func(), err error)

	mu    sync.RWMutex
	store registry.Store // nil: nothing served
}

var (
	_ registry.Store          = (*OtherSlot)(nil)
	_ registry.Lister         = (*OtherSlot)(nil)
	_ registry.ManifestLister = (*OtherSlot)(nil)
)

// Serve looks at the markers every Interval until ctx ends, and serves
// the bundle of the slot one names for as long as one does. What goes
// wrong is logged, and tried again.
func (p *OtherSlot) Serve(ctx context.Context) {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	warned := ""
	for {
		slot, marker, err := p.named()
		if slot != "" {
			// A slot that cannot be served now is tried again.
			err = p.serve(ctx, t, slot, marker)
		}
		if err != nil && err.Error() != warned {
			warned = err.Error()
			p.Log.Warn("registry: the other slot's bundle is not served", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serve mounts slot and serves its bundle until no marker names it.
func (p *OtherSlot) serve(ctx context.Context, t *time.Ticker, slot layout.Slot, marker string) error {
	unmount, err := p.Mount(ctx, p.ByPartLabel, slot, p.MountDir)
	if err != nil {
		return fmt.Errorf("mount slot %s, which %s names: %w", slot, marker, err)
	}
	defer unmount()
	bundle := filepath.Join(p.MountDir, layout.BundleDir)
	st, err := registry.OpenLayout(bundle, registry.WithLogger(p.Log))
	if err != nil {
		return fmt.Errorf("open slot %s's bundle %s: %w", slot, bundle, err)
	}
	p.set(st)
	defer func() {
		// Served no more, then closed: an open directory of the slot
		// would keep its partition busy after the unmount.
		p.set(nil)
		if c, ok := st.(io.Closer); ok {
			_ = c.Close() // read only
		}
	}()
	p.Log.Info("registry: serving the bundle of slot "+string(slot)+" too, while "+marker+" names it", "slot", slot)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if now, _, _ := p.named(); now != slot {
			p.Log.Info("registry: no longer serving slot "+string(slot)+"'s bundle", "slot", slot)
			return nil
		}
	}
}

// named reads the markers: the slot the first present one names and that
// marker, or "" when none is present.
func (p *OtherSlot) named() (layout.Slot, string, error) {
	for _, m := range p.Markers {
		b, err := os.ReadFile(m)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return "", "", err
		}
		slot := layout.Slot(strings.TrimSpace(string(b)))
		if !slot.Valid() {
			return "", "", fmt.Errorf("%s: %q names no slot (a or b)", m, strings.TrimSpace(string(b)))
		}
		return slot, m, nil
	}
	return "", "", nil
}

func (p *OtherSlot) set(st registry.Store) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.store = st
}

func (p *OtherSlot) current() registry.Store {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.store
}

// Resolve implements registry.Store.
func (p *OtherSlot) Resolve(ctx context.Context, repo, reference string) (v1.Descriptor, error) {
	st := p.current()
	if st == nil {
		return v1.Descriptor{}, fmt.Errorf("the other slot: %w", registry.ErrUnknownRepository)
	}
	return st.Resolve(ctx, repo, reference)
}

// Open implements registry.Store.
func (p *OtherSlot) Open(ctx context.Context, digest v1.Hash) (*registry.Content, error) {
	st := p.current()
	if st == nil {
		return nil, fmt.Errorf("the other slot: %w", registry.ErrNotFound)
	}
	return st.Open(ctx, digest)
}

// Repositories implements registry.Lister.
func (p *OtherSlot) Repositories(ctx context.Context) ([]string, error) {
	if l, ok := p.current().(registry.Lister); ok {
		return l.Repositories(ctx)
	}
	return nil, nil
}

// Tags implements registry.Lister.
func (p *OtherSlot) Tags(ctx context.Context, repo string) ([]string, error) {
	if l, ok := p.current().(registry.Lister); ok {
		return l.Tags(ctx, repo)
	}
	return nil, fmt.Errorf("the other slot: %w", registry.ErrUnknownRepository)
}

// Manifests implements registry.ManifestLister.
func (p *OtherSlot) Manifests(ctx context.Context, repo string) ([]v1.Descriptor, error) {
	if l, ok := p.current().(registry.ManifestLister); ok {
		return l.Manifests(ctx, repo)
	}
	return nil, fmt.Errorf("the other slot: %w", registry.ErrUnknownRepository)
}
