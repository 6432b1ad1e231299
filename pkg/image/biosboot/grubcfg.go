package biosboot

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"

	"github.com/terrarium-os/terrarium/pkg/contract/grubenv"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Config is what an image's GRUB configuration says.
type Config struct {
	// TimeoutSeconds the menu waits (0 boots at once), as loader.conf's.
	TimeoutSeconds int
	// Default is the slot tried first while the environment block names
	// none (the build's boot.default).
	Default layout.Slot
	// Cmdline is the kernel command line before terrarium.slot, the same
	// as every entry's: an upgrade's entry keeps the running entry's.
	Cmdline []string
}

// maxTries is the largest boot counter an entry carries.
const maxTries = layout.MaxBootTries

// GrubCfg renders the configuration GRUB reads from layout.ESPGrubConfig.
func (c Config) GrubCfg() (string, error) {
	if !c.Default.Valid() {
		return "", fmt.Errorf("GRUB configuration: default slot %q is not a or b", c.Default)
	}
	for _, a := range c.Cmdline {
		if err := CheckKernelArg(a); err != nil {
			return "", fmt.Errorf("GRUB configuration: %w", err)
		}
	}
	type slotView struct {
		Slot      layout.Slot
		Tried, Of string
		Kernel    string
		Initrd    string
		Cmdline   string
	}
	var slots []slotView
	for _, s := range layout.Slots() {
		slots = append(slots, slotView{
			Slot: s, Tried: s.GrubTried(), Of: s.GrubTriedOf(),
			Kernel: "/" + s.KernelPath(), Initrd: "/" + s.InitrdPath(),
			Cmdline: strings.Join(s.Cmdline(c.Cmdline), " "),
		})
	}
	xs := make([]string, maxTries)
	for i := range xs {
		xs[i] = strings.Repeat("x", i+1)
	}
	var b bytes.Buffer
	err := grubCfgTemplate.Execute(&b, map[string]any{
		"Timeout": c.TimeoutSeconds, "Default": c.Default, "Other": c.Default.Other(),
		"Slots": slots, "Xs": xs, "Env": layout.ESPGrubEnv, "Prefer": layout.GrubPrefer,
		"Entries": layout.ESPEntriesDir, "Prefix": layout.ESPEntryTokenPrefix,
	})
	return b.String(), err
}

// CheckKernelArg refuses a kernel argument GRUB's script would not pass
// on as it is: empty, or holding a quote, a variable, an operator, a
// wildcard, a comment or a space.
func CheckKernelArg(a string) error {
	if a == "" || strings.ContainsAny(a, "\"'\\$;{}|&<>*?# \t\n") {
		return fmt.Errorf("the kernel argument %q is empty or holds a character GRUB's script reads (\" ' \\ $ ; { } | & < > * ? # or a space)", a)
	}
	return nil
}

// InitialEnv is the environment block an image starts with: prefer is
// the slot GRUB tries first (the build's default).
func InitialEnv(prefer layout.Slot) ([]byte, error) {
	return grubenv.Encode(grubenv.Env{layout.GrubPrefer: string(prefer)})
}

// grubCfgTemplate decides as systemd-boot does with loader.conf's
// "default terrarium-*" and the entries' sort keys (package slotinstall):
// the slot last installed while its entry is blessed or has tries left,
// else the other slot while its entry is, else the slot last installed.
// GRUB cannot rename a file, so a try of a counted entry is an x in the
// environment block, for the entry file named beside it; the tries left
// are the name's less those x, and the node's initramfs counts them in
// the name (package bootloader) before anything else reads it.
// console makes GRUB's console the screen and the first serial port, as
// the kernel's (both menus start with it).
const console = `serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
terminfo -g 240x50 serial
`

var grubCfgTemplate = template.Must(template.New("grub.cfg").Parse(`# Terrarium's BIOS boot, written by imagebuild: docs/on-disk-contract.md#bios-boot.
# The Boot Loader Spec entries in /{{.Entries}} decide, as under systemd-boot.
` + console + `set timeout={{.Timeout}}
set timeout_style=menu
set terrarium_env=($root)/{{.Env}}
export terrarium_env
load_env --file $terrarium_env {{.Prefer}}{{range .Slots}} {{.Tried}} {{.Of}}{{end}}

# terrarium_look SLOT TRIED OF KERNEL sets look_state (blessed, trial, spent, or
# none without an entry or a kernel), look_entry (the entry file) and
# look_tried (its tries not yet counted in its name).
function terrarium_look {
  set look_state=none
  set look_entry="no entry"
  set look_tried=
  if [ ! -f "($root)$4" ]; then return; fi
  for f in ($root)/{{.Entries}}/{{.Prefix}}${1}*.conf; do
    if [ ! -f "$f" ]; then continue; fi
    if regexp "/{{.Prefix}}${1}[.]conf\$" "$f"; then
      set look_state=blessed
      set look_entry="{{.Prefix}}${1}.conf"
    elif regexp --set=1:look_entry "/({{.Prefix}}${1}[+][0-9]+(-[0-9]+)?[.]conf)\$" "$f"; then
      regexp --set=1:look_left "[+]([0-9]+)" "$look_entry"
      set look_tried=
      if [ "$3" = "$look_entry" ]; then set look_tried="$2"; fi
      set look_xs=
{{- range .Xs}}
      if [ "$look_left" = {{len .}} ]; then set look_xs={{.}}; fi
{{- end}}
      if regexp "^${look_tried}x" "$look_xs"; then set look_state=trial; else set look_state=spent; fi
    fi
  done
}

# terrarium_try SLOT ENTRY TRIED records a try of a counted entry; a try
# that cannot be recorded is not made, or a failing slot would be tried
# for ever.
function terrarium_try {
  set terrarium_tried_${1}="${3}x"
  set terrarium_tried_${1}_of="${2}"
  if ! save_env --file $terrarium_env terrarium_tried_${1} terrarium_tried_${1}_of; then
    echo "Terrarium: cannot record a try of slot ${1} in $terrarium_env: not booting it"
    sleep 10
    return 1
  fi
}
{{range .Slots}}
terrarium_look {{.Slot}} "${{.Tried}}" "${{.Of}}" {{.Kernel}}
set state_{{.Slot}}="$look_state"
set entry_{{.Slot}}="$look_entry"
set tried_{{.Slot}}="$look_tried"
export state_{{.Slot}} entry_{{.Slot}} tried_{{.Slot}}
{{- end}}

set first={{.Default}}
set first_state="$state_{{.Default}}"
set second={{.Other}}
set second_state="$state_{{.Other}}"
if [ "${{.Prefer}}" = {{.Other}} ]; then
  set first={{.Other}}
  set first_state="$state_{{.Other}}"
  set second={{.Default}}
  set second_state="$state_{{.Default}}"
fi
set boot_slot=$first
set other_slot=$second
if [ "$first_state" != blessed -a "$first_state" != trial ]; then
  if [ "$second_state" = blessed -o "$second_state" = trial ]; then
    set boot_slot=$second
    set other_slot=$first
  fi
fi
set default={{.Prefix}}$boot_slot
set fallback={{.Prefix}}$other_slot
echo "Terrarium: slot a $state_a ($entry_a), slot b $state_b ($entry_b): booting slot $boot_slot"
{{range .Slots}}
if [ "$state_{{.Slot}}" != none ]; then
  menuentry "Terrarium, slot {{.Slot}} ($entry_{{.Slot}}, $state_{{.Slot}})" --id {{$.Prefix}}{{.Slot}} {
    set terrarium_go=1
    if [ "$state_{{.Slot}}" = trial ]; then
      if ! terrarium_try {{.Slot}} "$entry_{{.Slot}}" "$tried_{{.Slot}}"; then set terrarium_go=0; fi
    fi
    if [ "$terrarium_go" = 1 ]; then
      linux {{.Kernel}} {{.Cmdline}}
      initrd {{.Initrd}}
    fi
  }
fi
{{- end}}
if [ "$state_a" = none -a "$state_b" = none ]; then
  echo "Terrarium: no boot entry in /{{.Entries}} on this disk; rebooting in 30 s"
  sleep 30
  reboot
fi
`))
