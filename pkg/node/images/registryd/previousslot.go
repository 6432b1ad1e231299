package registryd

import (
	"context"
	"errors"
	"fmt"
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

// PreviousSlot serves, during an upgrade's trial boot, the bundle of the
// slot the boot falls back to, behind the booted slot's own.
//
// Until `kubeadm upgrade` has moved the node, its static pods name the old
// Kubernetes, whose images only the old slot carries. containerd normally
// still holds them; but a trial boot cut short (its power lost) starts
// containerd from an empty store (pkg/node/images/unpackwindow), and without the
// old slot's images the old control plane, which the upgrade needs
// running, could not start again. The initramfs says when a boot is such a
// trial (Marker, layout.RunTrialBoot, naming the other slot); firstboot
// removes the marker when it blesses the boot, and the registry then
// unmounts the old slot, which the next upgrade may write.
type PreviousSlot struct {
	Marker      string        // layout.RunTrialBoot
	ByPartLabel string        // where partitions' links are, by label
	MountDir    string        // layout.RegistryPreviousSlotDir
	Interval    time.Duration // how often the marker is looked at
	Log         *slog.Logger
	// Mount mounts a slot read-only (slotmount.Mount).
	Mount func(ctx context.Context, byPartLabel string, slot layout.Slot, mnt string) (unmount func(), err error)

	mu    sync.RWMutex
	store registry.Store // nil: nothing served
}

var (
	_ registry.Store          = (*PreviousSlot)(nil)
	_ registry.Lister         = (*PreviousSlot)(nil)
	_ registry.ManifestLister = (*PreviousSlot)(nil)
)

// Serve mounts the previous slot when this boot is an upgrade's trial and
// serves its bundle until the marker goes or ctx ends. It returns at once
// on any other boot.
func (p *PreviousSlot) Serve(ctx context.Context) error {
	slot, err := p.trialOver()
	if err != nil || slot == "" {
		return err
	}
	unmount, err := p.Mount(ctx, p.ByPartLabel, slot, p.MountDir)
	if err != nil {
		return fmt.Errorf("mount slot %s, which this trial boot falls back to: %w", slot, err)
	}
	defer unmount()
	bundle := filepath.Join(p.MountDir, layout.BundleDir)
	st, err := registry.OpenLayout(bundle, registry.WithLogger(p.Log))
	if err != nil {
		return fmt.Errorf("open slot %s's bundle %s: %w", slot, bundle, err)
	}
	p.set(st)
	p.Log.Info("registry: this is an upgrade's trial boot: serving the bundle of slot "+string(slot)+" too, until the boot is blessed", "slot", slot)
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.set(nil)
			return nil
		case <-t.C:
		}
		if _, err := os.Stat(p.Marker); errors.Is(err, os.ErrNotExist) {
			p.set(nil)
			p.Log.Info("registry: the trial boot is blessed: no longer serving slot "+string(slot)+"'s bundle", "slot", slot)
			return nil
		}
	}
}

// trialOver reads the marker: the slot this trial boot falls back to, or
// "" when this boot is no upgrade's trial.
func (p *PreviousSlot) trialOver() (layout.Slot, error) {
	b, err := os.ReadFile(p.Marker)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	slot := layout.Slot(strings.TrimSpace(string(b)))
	if !slot.Valid() {
		return "", fmt.Errorf("%s: %q names no slot (a or b)", p.Marker, strings.TrimSpace(string(b)))
	}
	return slot, nil
}

func (p *PreviousSlot) set(st registry.Store) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.store = st
}

func (p *PreviousSlot) current() registry.Store {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.store
}

// Resolve implements registry.Store.
func (p *PreviousSlot) Resolve(ctx context.Context, repo, reference string) (v1.Descriptor, error) {
	st := p.current()
	if st == nil {
		return v1.Descriptor{}, fmt.Errorf("the previous slot: %w", registry.ErrUnknownRepository)
	}
	return st.Resolve(ctx, repo, reference)
}

// Open implements registry.Store.
func (p *PreviousSlot) Open(ctx context.Context, digest v1.Hash) (*registry.Content, error) {
	st := p.current()
	if st == nil {
		return nil, fmt.Errorf("the previous slot: %w", registry.ErrNotFound)
	}
	return st.Open(ctx, digest)
}

// Repositories implements registry.Lister.
func (p *PreviousSlot) Repositories(ctx context.Context) ([]string, error) {
	if l, ok := p.current().(registry.Lister); ok {
		return l.Repositories(ctx)
	}
	return nil, nil
}

// Tags implements registry.Lister.
func (p *PreviousSlot) Tags(ctx context.Context, repo string) ([]string, error) {
	if l, ok := p.current().(registry.Lister); ok {
		return l.Tags(ctx, repo)
	}
	return nil, fmt.Errorf("the previous slot: %w", registry.ErrUnknownRepository)
}

// Manifests implements registry.ManifestLister.
func (p *PreviousSlot) Manifests(ctx context.Context, repo string) ([]v1.Descriptor, error) {
	if l, ok := p.current().(registry.ManifestLister); ok {
		return l.Manifests(ctx, repo)
	}
	return nil, fmt.Errorf("the previous slot: %w", registry.ErrUnknownRepository)
}
