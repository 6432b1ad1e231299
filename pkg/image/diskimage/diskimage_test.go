package diskimage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

const MiB = layout.MiB

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): run make deps", name, err)
	}
	return p
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name       string
		parts      []Partition
		wantStarts []int64
		wantSizes  []int64
		wantDisk   int64
	}{
		{
			name:       "aligned",
			parts:      []Partition{{Label: "EFI", Size: 256 * MiB}, {Label: "TERRA-A", Size: 1536 * MiB}, {Label: "TERRA-B", Size: 1536 * MiB}},
			wantStarts: []int64{1 * MiB, 257 * MiB, 1793 * MiB},
			wantSizes:  []int64{256 * MiB, 1536 * MiB, 1536 * MiB},
			wantDisk:   (1 + 256 + 1536 + 1536 + 1) * MiB,
		},
		{
			name:       "rounded up",
			parts:      []Partition{{Label: "x", Size: 1}, {Label: "y", Size: 2*MiB + 1}, {Label: "z", Size: MiB - 1}},
			wantStarts: []int64{1 * MiB, 2 * MiB, 5 * MiB},
			wantSizes:  []int64{1 * MiB, 3 * MiB, 1 * MiB},
			wantDisk:   7 * MiB,
		},
		{
			name:     "no partitions",
			parts:    nil,
			wantDisk: 2 * MiB,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sizesBefore []int64
			for _, p := range tt.parts {
				sizesBefore = append(sizesBefore, p.Size)
			}
			placed, size := Plan("img", tt.parts)
			if size != tt.wantDisk {
				t.Errorf("disk size %d MiB, want %d MiB", size/MiB, tt.wantDisk/MiB)
			}
			if len(placed) != len(tt.parts) {
				t.Fatalf("%d placed, want %d", len(placed), len(tt.parts))
			}
			guids := map[string]bool{}
			for i, p := range placed {
				if p.Start != tt.wantStarts[i] || p.Size != tt.wantSizes[i] {
					t.Errorf("%s at %d size %d, want at %d size %d", p.Label, p.Start, p.Size, tt.wantStarts[i], tt.wantSizes[i])
				}
				if p.Start%layout.Alignment != 0 || p.Size%layout.Alignment != 0 {
					t.Errorf("%s not aligned: start %d size %d", p.Label, p.Start, p.Size)
				}
				if p.Label != tt.parts[i].Label {
					t.Errorf("placed[%d] is %s, want %s", i, p.Label, tt.parts[i].Label)
				}
				if p.GUID != layout.StableGUID("img", "part:"+p.Label) {
					t.Errorf("%s GUID %s is not StableGUID(img, part:%s)", p.Label, p.GUID, p.Label)
				}
				if guids[p.GUID] {
					t.Errorf("GUID %s used twice", p.GUID)
				}
				guids[p.GUID] = true
				if i > 0 && p.Start != placed[i-1].Start+placed[i-1].Size {
					t.Errorf("%s does not follow %s", p.Label, placed[i-1].Label)
				}
			}
			for i, p := range tt.parts {
				if p.Size != sizesBefore[i] {
					t.Errorf("Plan changed its input: parts[%d].Size %d, was %d", i, p.Size, sizesBefore[i])
				}
			}
		})
	}
	// Another image id gives other GUIDs, the same positions.
	a, _ := Plan("one", []Partition{{Label: "EFI", Size: MiB}})
	b, _ := Plan("two", []Partition{{Label: "EFI", Size: MiB}})
	if a[0].GUID == b[0].GUID || a[0].Start != b[0].Start {
		t.Errorf("Plan(one) %+v vs Plan(two) %+v: want different GUIDs, same start", a[0], b[0])
	}
}

// source writes a file of n bytes with a recognizable pattern.
func source(t *testing.T, dir, name string, n int) (string, []byte) {
	t.Helper()
	data := bytes.Repeat([]byte(name+"|"), n/(len(name)+1)+1)[:n]
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func smallDisk(t *testing.T) ([]Partition, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	espSrc, espData := source(t, dir, "esp", 2*int(MiB))   // fills its partition
	aSrc, aData := source(t, dir, "slot-a", int(MiB)+4321) // partial, odd size
	parts := []Partition{
		{Label: layout.LabelESP, Type: layout.TypeESP, Size: 2 * MiB, Source: espSrc},
		{Label: layout.LabelSlotA, Type: layout.TypeRootX86_64, Size: 3 * MiB, Source: aSrc},
		{Label: layout.LabelSlotB, Type: layout.TypeRootX86_64, Size: 4 * MiB},
	}
	return parts, map[string][]byte{layout.LabelESP: espData, layout.LabelSlotA: aData}
}

func TestWriteRaw(t *testing.T) {
	sgdisk := requireTool(t, "sgdisk")
	parts, data := smallDisk(t)
	path := filepath.Join(t.TempDir(), "disk.raw")
	placed, err := WriteRaw(context.Background(), path, "test-image", parts)
	if err != nil {
		t.Fatalf("WriteRaw: %v", err)
	}
	wantPlaced, wantSize := Plan("test-image", parts)
	if len(placed) != 3 {
		t.Fatalf("%d placed, want 3", len(placed))
	}
	for i := range placed {
		if placed[i] != wantPlaced[i] {
			t.Errorf("placed[%d] = %+v, want %+v (as Plan)", i, placed[i], wantPlaced[i])
		}
	}
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(img)) != wantSize {
		t.Errorf("image is %d bytes, want %d", len(img), wantSize)
	}
	if _, err := os.Stat(path + ".partial"); !os.IsNotExist(err) {
		t.Errorf("%s.partial left behind: %v", path, err)
	}

	t.Run("content", func(t *testing.T) {
		for _, p := range placed {
			region := img[p.Start : p.Start+p.Size]
			want := data[p.Label]
			if !bytes.Equal(region[:len(want)], want) {
				t.Errorf("%s: content at %d differs from its source", p.Label, p.Start)
			}
			if rest := region[len(want):]; len(bytes.Trim(rest, "\x00")) != 0 {
				t.Errorf("%s: %d bytes after the source are not all zero", p.Label, len(rest))
			}
		}
		// Nothing between the protective MBR/GPT and the first partition
		// but the GPT itself; the MBR is protective.
		if img[510] != 0x55 || img[511] != 0xAA || img[446+4] != 0xEE {
			t.Errorf("no protective MBR: signature %x %x, type %#x", img[510], img[511], img[446+4])
		}
		if string(img[512:520]) != "EFI PART" {
			t.Errorf("no GPT header at LBA 1: %q", img[512:520])
		}
		if string(img[len(img)-512:len(img)-504]) != "EFI PART" {
			t.Errorf("no backup GPT header in the last sector: %q", img[len(img)-512:len(img)-504])
		}
	})

	t.Run("sgdisk -v", func(t *testing.T) {
		out, err := exec.Command(sgdisk, "-v", path).CombinedOutput()
		if err != nil {
			t.Fatalf("sgdisk -v: %v\n%s", err, out)
		}
		if !bytes.Contains(out, []byte("No problems found")) {
			t.Errorf("sgdisk -v does not say \"No problems found\":\n%s", out)
		}
		for _, bad := range []string{"Warning", "Problem:", "Caution", "corrupt", "Invalid"} {
			if bytes.Contains(out, []byte(bad)) {
				t.Errorf("sgdisk -v output contains %q:\n%s", bad, out)
			}
		}
	})

	t.Run("sgdisk -p", func(t *testing.T) {
		out, err := exec.Command(sgdisk, "-p", path).CombinedOutput()
		if err != nil {
			t.Fatalf("sgdisk -p: %v\n%s", err, out)
		}
		wantGUID := strings.ToUpper(layout.StableGUID("test-image", "disk"))
		if !bytes.Contains(out, []byte("Disk identifier (GUID): "+wantGUID)) {
			t.Errorf("disk GUID is not %s:\n%s", wantGUID, out)
		}
		// Number, start sector, end sector, size, code, name.
		row := regexp.MustCompile(`(?m)^\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+ \S+\s+(\S+)\s+(\S+)\s*$`)
		rows := row.FindAllStringSubmatch(string(out), -1)
		if len(rows) != len(placed) {
			t.Fatalf("sgdisk -p lists %d partitions, want %d:\n%s", len(rows), len(placed), out)
		}
		codes := map[string]string{layout.TypeESP: "EF00", layout.TypeRootX86_64: "8304"}
		for i, p := range placed {
			r := rows[i]
			wantStart := p.Start / layout.SectorSize
			wantEnd := (p.Start+p.Size)/layout.SectorSize - 1
			if r[2] != itoa(wantStart) || r[3] != itoa(wantEnd) {
				t.Errorf("partition %s: sectors %s-%s, want %d-%d", r[1], r[2], r[3], wantStart, wantEnd)
			}
			if r[4] != codes[p.Type] {
				t.Errorf("partition %s: type code %s, want %s", r[1], r[4], codes[p.Type])
			}
			if r[5] != p.Label {
				t.Errorf("partition %s: name %q, want %q", r[1], r[5], p.Label)
			}
		}
	})

	t.Run("sgdisk -i", func(t *testing.T) {
		for i, p := range placed {
			out, err := exec.Command(sgdisk, "-i", itoa(int64(i+1)), path).CombinedOutput()
			if err != nil {
				t.Fatalf("sgdisk -i %d: %v\n%s", i+1, err, out)
			}
			if want := "Partition unique GUID: " + strings.ToUpper(p.GUID); !bytes.Contains(out, []byte(want)) {
				t.Errorf("partition %d: no %q in:\n%s", i+1, want, out)
			}
			if want := "Partition GUID code: " + p.Type; !bytes.Contains(out, []byte(want)) {
				t.Errorf("partition %d: no %q in:\n%s", i+1, want, out)
			}
		}
	})
}

func TestWriteRawReproducible(t *testing.T) {
	parts, _ := smallDisk(t)
	dir := t.TempDir()
	var images [][]byte
	for _, name := range []string{"one.raw", "two.raw"} {
		p := filepath.Join(dir, name)
		if _, err := WriteRaw(context.Background(), p, "img", parts); err != nil {
			t.Fatalf("WriteRaw: %v", err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, b)
	}
	if !bytes.Equal(images[0], images[1]) {
		t.Error("two WriteRaw calls with the same inputs differ")
	}
	// Another image id changes the GUIDs, so the comparison can fail.
	p := filepath.Join(dir, "three.raw")
	if _, err := WriteRaw(context.Background(), p, "other", parts); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(images[0], b) {
		t.Error("another image id gave the same image")
	}
}

func TestWriteRawErrors(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(t *testing.T, parts []Partition) context.Context
		errPart string
		errIs   error
	}{
		{"source larger than partition", func(t *testing.T, parts []Partition) context.Context {
			big, _ := source(t, t.TempDir(), "big", 3*int(MiB)+1)
			parts[1].Source = big
			return context.Background()
		}, "larger than the 3 MiB partition", nil},
		{"missing source", func(t *testing.T, parts []Partition) context.Context {
			parts[1].Source = filepath.Join(t.TempDir(), "missing")
			return context.Background()
		}, "TERRA-A", os.ErrNotExist},
		{"canceled", func(t *testing.T, parts []Partition) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, "", context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts, _ := smallDisk(t)
			ctx := tt.modify(t, parts)
			path := filepath.Join(t.TempDir(), "disk.raw")
			placed, err := WriteRaw(ctx, path, "img", parts)
			if err == nil {
				t.Fatalf("WriteRaw succeeded (%+v), want an error", placed)
			}
			if placed != nil {
				t.Errorf("WriteRaw returned placements with its error: %+v", placed)
			}
			if !strings.Contains(err.Error(), tt.errPart) {
				t.Errorf("error %q does not contain %q", err, tt.errPart)
			}
			if tt.errIs != nil && !errors.Is(err, tt.errIs) {
				t.Errorf("error %v is not %v", err, tt.errIs)
			}
			for _, p := range []string{path, path + ".partial"} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s exists after a failed WriteRaw (%v)", p, err)
				}
			}
		})
	}
}

func TestWriteRawReplacesOldImage(t *testing.T) {
	parts, _ := smallDisk(t)
	path := filepath.Join(t.TempDir(), "disk.raw")
	if err := os.WriteFile(path, []byte("old image"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".partial", []byte("stale partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, size := Plan("img", parts)
	if _, err := WriteRaw(context.Background(), path, "img", parts); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != size {
		t.Errorf("image after WriteRaw: %v, %v; want %d bytes", fi, err, size)
	}
	if _, err := os.Stat(path + ".partial"); !os.IsNotExist(err) {
		t.Errorf("stale .partial left behind: %v", err)
	}
}

func TestDraw(t *testing.T) {
	parts := []Partition{
		{Label: layout.LabelESP, Type: layout.TypeESP, Size: 256 * MiB, Source: "esp.img"},
		{Label: layout.LabelSlotA, Type: layout.TypeRootX86_64, Size: 1536 * MiB, Source: "a.squashfs"},
		{Label: layout.LabelSlotB, Type: layout.TypeRootX86_64, Size: 1536 * MiB},
		{Label: "EXTRA", Type: "0FC63DAF-8483-4772-8E79-3D69D8477DE4", Size: 2 * MiB},
	}
	placed, size := Plan("img", parts)
	out := Draw(placed, size)
	for _, want := range []string{
		layout.LabelESP, layout.LabelSlotA, layout.LabelSlotB, "EXTRA",
		"EFI System", "Linux root (x86-64)", "0FC63DAF-8483-4772-8E79-3D69D8477DE4",
		"TERRA-STATE",
		"(disk)", "3332Mi",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Draw output lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(out, "\n")
	bar := lines[0]
	if !strings.HasPrefix(bar, "|#") || !strings.Contains(bar, "|.") {
		t.Errorf("bar %q should show written (#) and empty (.) partitions", bar)
	}
	if n := strings.Count(strings.SplitN(bar, "  +", 2)[0], "|"); n != len(placed)+1 {
		t.Errorf("bar %q has %d separators, want %d", bar, n, len(placed)+1)
	}
	// Every label sits under its part of the bar, even a tiny partition.
	names := lines[1]
	for _, p := range placed {
		if !strings.Contains(names, p.Label) {
			t.Errorf("names line %q lacks %s", names, p.Label)
		}
	}
	row := regexp.MustCompile(`(?m)^  TERRA-A\s+257Mi\s+1536Mi  Linux root \(x86-64\)$`)
	if !row.MatchString(out) {
		t.Errorf("no table row for TERRA-A at 257Mi of 1536Mi:\n%s", out)
	}
	if typeName(layout.TypeVar) != "Linux /var" {
		t.Errorf("typeName(TypeVar) = %q", typeName(layout.TypeVar))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestConvertQCOW2(t *testing.T) {
	qemuImg := requireTool(t, "qemu-img")
	parts, _ := smallDisk(t)
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	if _, err := WriteRaw(context.Background(), raw, "img", parts); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "disk.qcow2")
	if err := ConvertQCOW2(context.Background(), raw, out); err != nil {
		t.Fatalf("ConvertQCOW2: %v", err)
	}
	if _, err := os.Stat(out + ".partial"); !os.IsNotExist(err) {
		t.Errorf("%s.partial left behind: %v", out, err)
	}
	cmp, err := exec.Command(qemuImg, "compare", "-f", "raw", "-F", "qcow2", raw, out).CombinedOutput()
	if err != nil {
		t.Errorf("qemu-img compare raw qcow2: %v\n%s", err, cmp)
	}
	info, err := exec.Command(qemuImg, "info", out).CombinedOutput()
	if err != nil || !bytes.Contains(info, []byte("file format: qcow2")) {
		t.Errorf("qemu-img info: %v\n%s", err, info)
	}

	t.Run("missing raw", func(t *testing.T) {
		out := filepath.Join(dir, "missing.qcow2")
		err := ConvertQCOW2(context.Background(), filepath.Join(dir, "missing.raw"), out)
		if err == nil || !strings.Contains(err.Error(), "missing.raw") {
			t.Errorf("ConvertQCOW2 of a missing file: error %v, want one naming it", err)
		}
		for _, p := range []string{out, out + ".partial"} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s exists after a failed conversion (%v)", p, err)
			}
		}
	})
}
