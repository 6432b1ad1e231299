package bootinit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// diskInfo is the boot disk and its labelled partitions.
type diskInfo struct {
	name  string            // kernel name, e.g. "vda"
	parts map[string]string // GPT label -> kernel partition name, e.g. "vda2"
}

func (d *diskInfo) dev() string { return "/dev/" + d.name }

func (d *diskInfo) partDev(label string) (string, bool) {
	p, ok := d.parts[label]
	return "/dev/" + p, ok
}

// scanPartitions reads every block partition's GPT label from sysfs.
func scanPartitions(sysBlock string) (map[string]*diskInfo, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, err
	}
	disks := map[string]*diskInfo{}
	for _, e := range entries {
		uevent, err := os.ReadFile(filepath.Join(sysBlock, e.Name(), "uevent"))
		if err != nil {
			continue
		}
		var label string
		for _, line := range strings.Split(string(uevent), "\n") {
			if v, ok := strings.CutPrefix(line, "PARTNAME="); ok {
				label = v
			}
		}
		if label == "" {
			continue
		}
		target, err := os.Readlink(filepath.Join(sysBlock, e.Name()))
		if err != nil {
			continue
		}
		parent := filepath.Base(filepath.Dir(target))
		d := disks[parent]
		if d == nil {
			d = &diskInfo{name: parent, parts: map[string]string{}}
			disks[parent] = d
		}
		d.parts[label] = e.Name()
	}
	return disks, nil
}

// findDisk waits for a disk that holds both the ESP and the active slot.
// When several do (an installer stick and an installed disk), the first by
// kernel name wins and the others are reported.
func (in *Init) findDisk(ctx context.Context) (*diskInfo, error) {
	label := in.slot().Label()
	deadline := time.Now().Add(in.partitionTimeout)
	for {
		disks, err := scanPartitions("/sys/class/block")
		if err != nil {
			return nil, err
		}
		var found []*diskInfo
		for _, d := range disks {
			if _, ok := d.parts[label]; ok {
				if _, ok := d.parts[layout.LabelESP]; ok {
					found = append(found, d)
				}
			}
		}
		sort.Slice(found, func(i, j int) bool { return found[i].name < found[j].name })
		if len(found) > 0 {
			for _, other := range found[1:] {
				in.say("also found a Terrarium disk on /dev/%s; booting from /dev/%s", other.name, found[0].name)
			}
			in.say("boot disk /dev/%s, slot %s on /dev/%s", found[0].name, in.slot(), found[0].parts[label])
			return found[0], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no disk with partitions %q and %q appeared within %s (is the storage controller's module in kernel.modules of the build spec?)", layout.LabelESP, label, in.partitionTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
