package diskimage

import (
	"fmt"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Draw renders a partition map: one bar scaled by size and a table.
func Draw(placed []Placed, diskSize int64) string {
	const width = 64
	var bar, names strings.Builder
	bar.WriteString("|")
	names.WriteString(" ")
	for _, p := range placed {
		w := max(int(p.Size*width/diskSize), len(p.Label)+2)
		fill := "#"
		if p.Source == "" {
			fill = "."
		}
		bar.WriteString(strings.Repeat(fill, w-1) + "|")
		fmt.Fprintf(&names, "%-*s", w, p.Label)
	}
	var b strings.Builder
	b.WriteString(bar.String() + "  + TERRA-STATE (created on first boot, fills the disk)\n")
	b.WriteString(names.String() + "\n\n")
	fmt.Fprintf(&b, "  %-12s %10s %10s  %s\n", "label", "start", "size", "type")
	for _, p := range placed {
		fmt.Fprintf(&b, "  %-12s %8dMi %8dMi  %s\n", p.Label, p.Start/layout.MiB, p.Size/layout.MiB, typeName(p.Type))
	}
	fmt.Fprintf(&b, "  %-12s %8dMi\n", "(disk)", diskSize/layout.MiB)
	return b.String()
}

func typeName(t string) string {
	switch t {
	case layout.TypeESP:
		return "EFI System"
	case layout.TypeRootX86_64:
		return "Linux root (x86-64)"
	case layout.TypeVar:
		return "Linux /var"
	}
	return t
}
