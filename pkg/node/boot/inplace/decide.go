// Package inplace decides whether an upgrade a node has staged in its
// other slot changes nothing but Kubernetes: the kubelet, kubeadm,
// kubectl and the bundle of images. Such an upgrade (a Kubernetes patch
// release, say) needs no reboot: the node can run the new Kubernetes from
// the staged slot where it stands, restarting only the kubelet and the
// control plane's static pods, as `talosctl upgrade-k8s` does, and boot
// the slot whole at its next reboot. Anything else an upgrade changes —
// the kernel, the initramfs, a library, firstboot itself — takes the
// reboot into the slot, as before.
//
// Decide compares the two slots' indexes (package slotindex), which each
// slot carries inside its verified squashfs, and what boots them; it reads
// no disk.
package inplace

import (
	"fmt"
	"maps"
	"path"
	"reflect"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/slotindex"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// Programs are the Kubernetes programs an in-place upgrade may change.
var Programs = []string{layout.KubeletProgram, layout.KubeadmProgram, layout.KubectlProgram}

// stamps are systemd's update stamps (/etc/.updated, /var/.updated), which
// carry the build's epoch and are read only at boot.
var stamps = []string{"/etc/.updated", "/var/.updated"}

// Slot is what Decide compares of a slot.
type Slot struct {
	// Index is the slot's index of its files (layout.SlotIndexFile).
	Index *slotindex.Index
	// Release is the slot's release.json (layout.ReleaseFile).
	Release release.Release
	// Boot is what boots the slot, as the SHA-256 of each part by its
	// role: the kernel and the initramfs, or a signed UKI.
	Boot map[upgrade.Role]string
}

// Decision is what Decide says of an upgrade.
type Decision struct {
	// InPlace says the upgrade changes only what Programs and the bundle
	// hold.
	InPlace bool
	// Reason says, in a clause for the console, what the upgrade changes
	// ("only Kubernetes changes: ...") or what takes the reboot
	// ("/usr/bin/firstboot changes").
	Reason string
	// Programs are those of Programs the upgrade changes, in that order.
	Programs []string
	// Bundle says the bundle's images change (layout.BundleDir,
	// layout.SlotLayersDir).
	Bundle bool
}

// noIndex is the reason for a slot built before slots carried an index.
const noIndex = "a slot has no index of its files (" + layout.SlotIndexFile + "; built before it was written)"

// maxNamed bounds the paths a reason names.
const maxNamed = 3

// Decide says whether the upgrade from the running slot to next may be
// applied in place.
func Decide(running, next Slot) Decision {
	if len(running.Boot) == 0 || !maps.Equal(running.Boot, next.Boot) {
		return Decision{Reason: "what boots the slot (the kernel, the initramfs or the UKI) changes"}
	}
	if running.Index == nil || next.Index == nil {
		return Decision{Reason: noIndex}
	}
	var d Decision
	var others []string
	programs := map[string]bool{}
	for _, c := range slotindex.Diff(running.Index, next.Index) {
		switch {
		case isProgram(c.Path):
			if c.Old == nil || c.New == nil || c.Old.Kind != slotindex.File || c.New.Kind != slotindex.File ||
				c.Old.Mode != c.New.Mode || c.Old.UID != c.New.UID || c.Old.GID != c.New.GID {
				others = append(others, describe(c))
				continue
			}
			programs[c.Path] = true
		case under(c.Path, layout.BundleDir), under(c.Path, layout.SlotLayersDir):
			d.Bundle = true
		case c.Path == layout.ReleaseFile:
			if why := releaseChange(running.Release, next.Release); why != "" {
				others = append(others, why)
			}
		case isStamp(c.Path) && c.Old != nil && c.New != nil && c.Old.Kind == slotindex.File && c.New.Kind == slotindex.File:
		default:
			others = append(others, describe(c))
		}
	}
	for _, p := range Programs {
		if programs[p] {
			d.Programs = append(d.Programs, p)
		}
	}
	if len(others) > 0 {
		named := others[:min(len(others), maxNamed)]
		d.Reason = strings.Join(named, ", ")
		if n := len(others) - len(named); n > 0 {
			d.Reason += fmt.Sprintf(", and %d more", n)
		}
		d.Programs, d.Bundle = nil, false
		return d
	}
	d.InPlace = true
	var what []string
	for _, p := range d.Programs {
		what = append(what, path.Base(p))
	}
	if d.Bundle {
		what = append(what, "the bundle's images")
	}
	if len(what) == 0 {
		d.Reason = "nothing but the release's version changes"
	} else {
		d.Reason = "only Kubernetes changes: " + strings.Join(what, ", ")
	}
	return d
}

func isProgram(p string) bool {
	for _, q := range Programs {
		if p == q {
			return true
		}
	}
	return false
}

func isStamp(p string) bool {
	for _, q := range stamps {
		if p == q {
			return true
		}
	}
	return false
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// releaseChange says what else than the version and the build time
// differs between two releases ("" nothing).
func releaseChange(old, next release.Release) string {
	old.Version, old.BuiltAt = "", ""
	next.Version, next.BuiltAt = "", ""
	switch {
	case old.Name != next.Name:
		return "the release's name changes"
	case old.Suite != next.Suite || old.KernelVersion != next.KernelVersion:
		return "the release's Debian suite or kernel changes"
	case old.BootTries != next.BootTries:
		return "the release's boot tries change"
	case strings.Join(old.Faults, ",") != strings.Join(next.Faults, ","):
		return "the release's faults change"
	case !reflect.DeepEqual(old, next):
		return "the release changes beyond its version"
	}
	return ""
}

func describe(c slotindex.Change) string {
	switch {
	case c.Old == nil:
		return c.Path + " is new"
	case c.New == nil:
		return c.Path + " is gone"
	}
	return c.Path + " changes"
}
