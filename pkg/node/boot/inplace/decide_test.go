package inplace

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/slotindex"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func sum(c byte) string { return strings.Repeat(string(c), 64) }

func file(p string, c byte) slotindex.Entry {
	return slotindex.Entry{Path: p, Kind: slotindex.File, Mode: 0o755, Size: 4, SHA256: sum(c)}
}

// slot is a small slot: the programs, a bundle blob, a layer file, the
// release, the stamps and firstboot, each file's content named by c.
func slot(version string, c map[string]byte) Slot {
	paths := []string{
		"/etc/.updated",
		layout.ReleaseFile,
		layout.BundleDir + "/blobs/sha256/aa",
		layout.SlotLayersDir + "/sha256/bb/usr/local/bin/kube-apiserver",
		layout.KubeadmProgram, layout.KubectlProgram, layout.KubeletProgram,
		"/usr/bin/firstboot",
		"/usr/lib/x86_64-linux-gnu/libc.so.6",
	}
	ix := &slotindex.Index{}
	for _, p := range paths {
		ch, ok := c[p]
		if !ok {
			ch = '1'
		}
		if ch == 0 { // left out
			continue
		}
		ix.Entries = append(ix.Entries, file(p, ch))
	}
	sortIndex(ix)
	return Slot{
		Index:   ix,
		Release: release.Release{Name: "terrarium", Version: version, Suite: "trixie", KernelVersion: "6.12.0", BuiltAt: "2026-01-01T00:00:00Z", BootTries: 3},
		Boot:    map[upgrade.Role]string{upgrade.RoleKernel: sum('k'), upgrade.RoleInitramfs: sum('i')},
	}
}

func sortIndex(ix *slotindex.Index) {
	sort.Slice(ix.Entries, func(i, j int) bool { return ix.Entries[i].Path < ix.Entries[j].Path })
}

func TestDecide(t *testing.T) {
	running := slot("0.1.0", nil)
	for _, tc := range []struct {
		name     string
		next     func() Slot
		inPlace  bool
		reason   string
		programs []string
		bundle   bool
	}{{
		name: "a Kubernetes patch",
		next: func() Slot {
			return slot("0.2.0", map[string]byte{
				layout.KubeletProgram: '2', layout.KubeadmProgram: '2', layout.KubectlProgram: '2', layout.ReleaseFile: '2',
				layout.BundleDir + "/blobs/sha256/aa": 0, layout.SlotLayersDir + "/sha256/bb/usr/local/bin/kube-apiserver": '2',
			})
		},
		inPlace: true, reason: "only Kubernetes changes: kubelet, kubeadm, kubectl, the bundle's images",
		programs: []string{layout.KubeletProgram, layout.KubeadmProgram, layout.KubectlProgram}, bundle: true,
	}, {
		name:    "only the images",
		next:    func() Slot { return slot("0.1.1", map[string]byte{layout.BundleDir + "/blobs/sha256/aa": '2'}) },
		inPlace: true, reason: "only Kubernetes changes: the bundle's images", bundle: true,
	}, {
		name: "only the version and the stamps",
		next: func() Slot {
			s := slot("0.1.1", map[string]byte{layout.ReleaseFile: '2', "/etc/.updated": '2'})
			s.Release.BuiltAt = "2026-02-01T00:00:00Z"
			return s
		},
		inPlace: true, reason: "nothing but the release's version changes",
	}, {
		name: "firstboot changes too",
		next: func() Slot {
			return slot("0.2.0", map[string]byte{layout.KubeletProgram: '2', "/usr/bin/firstboot": '2'})
		},
		reason: "/usr/bin/firstboot changes",
	}, {
		name: "many paths change",
		next: func() Slot {
			return slot("0.2.0", map[string]byte{"/usr/bin/firstboot": '2', "/usr/lib/x86_64-linux-gnu/libc.so.6": 0, "/etc/.updated": 0, layout.KubeletProgram: 0})
		},
		reason: "/etc/.updated is gone, /usr/bin/firstboot changes, /usr/bin/kubelet is gone, and 1 more",
	}, {
		name: "a program's mode changes",
		next: func() Slot {
			s := slot("0.2.0", nil)
			for i := range s.Index.Entries {
				if s.Index.Entries[i].Path == layout.KubeadmProgram {
					s.Index.Entries[i].Mode = 0o4755
				}
			}
			return s
		},
		reason: "/usr/bin/kubeadm changes",
	}, {
		name: "the kernel changes",
		next: func() Slot {
			s := slot("0.2.0", map[string]byte{layout.KubeletProgram: '2'})
			s.Boot[upgrade.RoleKernel] = sum('K')
			return s
		},
		reason: "what boots the slot (the kernel, the initramfs or the UKI) changes",
	}, {
		name: "a UKI instead",
		next: func() Slot {
			s := slot("0.2.0", nil)
			s.Boot = map[upgrade.Role]string{upgrade.RoleUKIA: sum('u')}
			return s
		},
		reason: "what boots the slot",
	}, {
		name: "a fault build",
		next: func() Slot {
			s := slot("0.2.0", map[string]byte{layout.ReleaseFile: '2'})
			s.Release.Faults = []string{"health"}
			return s
		},
		reason: "the release's faults change",
	}, {
		name: "another kernel version in the release",
		next: func() Slot {
			s := slot("0.2.0", map[string]byte{layout.ReleaseFile: '2'})
			s.Release.KernelVersion = "6.13.0"
			return s
		},
		reason: "the release's Debian suite or kernel changes",
	}, {
		name:   "no index",
		next:   func() Slot { s := slot("0.2.0", nil); s.Index = nil; return s },
		reason: "a slot has no index of its files",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(running, tc.next())
			assert.Equal(t, tc.inPlace, d.InPlace, d.Reason)
			assert.Contains(t, d.Reason, tc.reason)
			assert.Equal(t, tc.programs, d.Programs)
			assert.Equal(t, tc.bundle, d.Bundle)
		})
	}
}

func TestDecideWithoutBoot(t *testing.T) {
	running, next := slot("0.1.0", nil), slot("0.2.0", nil)
	running.Boot, next.Boot = nil, nil
	d := Decide(running, next)
	assert.False(t, d.InPlace, "what boots the running slot is unknown")
}
