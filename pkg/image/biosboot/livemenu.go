package biosboot

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// LiveEntry is an entry of the ISO's menu under BIOS.
type LiveEntry struct {
	// ID is the menu entry's id, Title what the menu shows.
	ID, Title string
	// Cmdline is the whole kernel command line.
	Cmdline []string
}

// LiveMenu is the ISO's GRUB menu under BIOS: the same entries as its
// systemd-boot menu under UEFI, the first the default, each booting the
// kernel and initramfs at layout.ISOGrubKernel and layout.ISOGrubInitrd.
//
// When a disk holds an installed Terrarium (its first partition the ESP
// with GRUB's configuration and a Terrarium entry), the default is that
// disk's own GRUB configuration instead: the handover the live system's
// initramfs does under UEFI (a boot option for the next boot) has no
// BIOS counterpart, so GRUB does it. The installer entry still installs.
type LiveMenu struct {
	// TimeoutSeconds the menu waits, as the UEFI menu's.
	TimeoutSeconds int
	Entries        []LiveEntry
}

// GrubCfg renders the menu GRUB reads from layout.ISOGrubConfig.
func (m LiveMenu) GrubCfg() (string, error) {
	if len(m.Entries) == 0 {
		return "", errors.New("the ISO's GRUB menu has no entry")
	}
	type view struct{ ID, Title, Cmdline string }
	entries := make([]view, 0, len(m.Entries))
	for _, e := range m.Entries {
		if e.ID == "" || strings.ContainsAny(e.ID, "\"'\\$;{}|&<>*?# \t\n") {
			return "", fmt.Errorf("the ISO's GRUB menu: entry id %q is empty or holds a character GRUB's script reads", e.ID)
		}
		if e.Title == "" || strings.ContainsAny(e.Title, "\"\\$\n") {
			return "", fmt.Errorf("the ISO's GRUB menu: the title %q of entry %s is empty or holds \", \\, $ or a newline", e.Title, e.ID)
		}
		for _, a := range e.Cmdline {
			if err := CheckKernelArg(a); err != nil {
				return "", fmt.Errorf("the ISO's GRUB menu, entry %s: %w", e.ID, err)
			}
		}
		entries = append(entries, view{ID: e.ID, Title: e.Title, Cmdline: strings.Join(e.Cmdline, " ")})
	}
	var b bytes.Buffer
	err := liveMenuTemplate.Execute(&b, map[string]any{
		"Timeout": m.TimeoutSeconds, "Entries": entries,
		"Kernel": "/" + layout.ISOGrubKernel, "Initrd": "/" + layout.ISOGrubInitrd,
		"DiskConfig": "/" + layout.ESPGrubConfig, "Entries_": layout.ESPEntriesDir, "Prefix": layout.ESPEntryTokenPrefix,
		"Disks": disks, "SlotKernels": slotKernels(),
	})
	return b.String(), err
}

// disks are the BIOS drives looked at for an installed Terrarium.
var disks = []string{"hd0", "hd1", "hd2", "hd3", "hd4", "hd5", "hd6", "hd7"}

// slotKernels are the ESP paths of the slots' kernels: a disk is handed
// over to only if its configuration has a slot to boot (else it would
// reboot, and the ISO hand over again, for ever).
func slotKernels() []string {
	var ks []string
	for _, s := range layout.Slots() {
		ks = append(ks, "/"+s.KernelPath())
	}
	return ks
}

var liveMenuTemplate = template.Must(template.New("grub.cfg").Parse(`# Terrarium's ISO under BIOS, written by imagebuild: docs/on-disk-contract.md#bios-boot.
` + console + `set timeout={{.Timeout}}
set timeout_style=menu
set default={{(index .Entries 0).ID}}
# The ISO, where the live entries' files are, whatever root a disk's
# configuration left behind when its menu was left (ESC).
set terrarium_iso=$root
export terrarium_iso

# An installed Terrarium on a disk is booted, as under UEFI the live
# system's initramfs hands the boot over to it.
set terrarium_disk=
for d in{{range .Disks}} {{.}}{{end}}; do
  if [ -f ($d,gpt1){{.DiskConfig}} ]; then
    for f in ($d,gpt1)/{{.Entries_}}/{{.Prefix}}*.conf; do
      if [ -f "$f" ]; then
        for k in{{range .SlotKernels}} {{.}}{{end}}; do
          if [ -f ($d,gpt1)$k ]; then set terrarium_disk=$d; fi
        done
      fi
    done
  fi
  if [ -n "$terrarium_disk" ]; then break; fi
done
if [ -n "$terrarium_disk" ]; then
  set default=terrarium-disk
  menuentry "Terrarium installed on the disk ($terrarium_disk)" --id terrarium-disk {
    echo "Terrarium: the ISO hands the boot over to the installed disk ($terrarium_disk)"
    set root=($terrarium_disk,gpt1)
    configfile {{.DiskConfig}}
  }
fi
{{range .Entries}}
menuentry "{{.Title}}" --id {{.ID}} {
  set root=$terrarium_iso
  linux {{$.Kernel}} {{.Cmdline}}
  initrd {{$.Initrd}}
}
{{end -}}
`))
