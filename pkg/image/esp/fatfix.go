package esp

import (
	"encoding/binary"
	"fmt"
	"os"
)

// fixFAT32 corrects three details go-diskfs gets wrong, which fsck.fat
// reports: at some sizes (64, 129, 194, 259 MiB) the FAT has no room for
// the last clusters; the ".." entry of a directory in the root must point to
// cluster 0 (not the root's cluster); and FSInfo must carry the free cluster
// count and next free cluster instead of "unknown".
func fixFAT32(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	v, err := readFAT32(f)
	if err != nil {
		return fmt.Errorf("fix FAT32 %s: %w", path, err)
	}
	if err := v.fitClusters(f); err != nil {
		return fmt.Errorf("fix FAT32 %s: %w", path, err)
	}
	if err := v.fixDotDot(f); err != nil {
		return fmt.Errorf("fix FAT32 %s: %w", path, err)
	}
	if err := v.writeFSInfo(f); err != nil {
		return fmt.Errorf("fix FAT32 %s: %w", path, err)
	}
	return f.Sync()
}

type fat32 struct {
	bps, spc, fsInfo int64
	fatSize          int64 // sectors per FAT
	fatStart         int64 // bytes
	dataStart        int64 // bytes
	rootCluster      uint32
	clusters         uint32 // data clusters
	fat              []uint32
}

func readFAT32(f *os.File) (*fat32, error) {
	bs := make([]byte, 512)
	if _, err := f.ReadAt(bs, 0); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	v := &fat32{bps: int64(le.Uint16(bs[11:])), spc: int64(bs[13]), fsInfo: int64(le.Uint16(bs[48:])), fatSize: int64(le.Uint32(bs[36:]))}
	reserved, nfats, fatSize := int64(le.Uint16(bs[14:])), int64(bs[16]), v.fatSize
	total := int64(le.Uint32(bs[32:]))
	if v.bps == 0 || v.spc == 0 || fatSize == 0 {
		return nil, fmt.Errorf("not a FAT32 boot sector")
	}
	v.fatStart = reserved * v.bps
	v.dataStart = (reserved + nfats*fatSize) * v.bps
	v.rootCluster = le.Uint32(bs[44:])
	v.clusters = uint32((total*v.bps - v.dataStart) / (v.spc * v.bps))
	v.clusters = min(v.clusters, uint32(fatSize*v.bps/4)-2)
	raw := make([]byte, (int64(v.clusters)+2)*4)
	if _, err := f.ReadAt(raw, v.fatStart); err != nil {
		return nil, err
	}
	v.fat = make([]uint32, v.clusters+2)
	for i := range v.fat {
		v.fat[i] = le.Uint32(raw[i*4:]) & 0x0FFFFFFF
	}
	return v, nil
}

// fitClusters shrinks the volume's sector count so every data cluster has
// a FAT entry (the last sectors of the partition stay unused).
func (v *fat32) fitClusters(f *os.File) error {
	want := uint32(v.dataStart/v.bps + int64(v.clusters)*v.spc)
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, 32); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(b) <= want {
		return nil
	}
	binary.LittleEndian.PutUint32(b, want)
	for _, sector := range []int64{0, 6} { // boot sector and its backup
		if _, err := f.WriteAt(b, sector*v.bps+32); err != nil {
			return err
		}
	}
	return nil
}

func (v *fat32) clusterOffset(c uint32) int64 {
	return v.dataStart + int64(c-2)*v.spc*v.bps
}

// chain returns a cluster chain starting at c.
func (v *fat32) chain(c uint32) []uint32 {
	var out []uint32
	for c >= 2 && c < uint32(len(v.fat)) && len(out) <= len(v.fat) {
		out = append(out, c)
		c = v.fat[c]
	}
	return out
}

func (v *fat32) fixDotDot(f *os.File) error {
	csize := v.spc * v.bps
	for _, c := range v.chain(v.rootCluster) {
		buf := make([]byte, csize)
		if _, err := f.ReadAt(buf, v.clusterOffset(c)); err != nil {
			return err
		}
		for off := int64(0); off < csize; off += 32 {
			e := buf[off : off+32]
			if e[0] == 0 {
				return nil
			}
			if e[0] == 0xE5 || e[11] == 0x0F || e[11]&0x10 == 0 || e[0] == '.' {
				continue
			}
			sub := uint32(binary.LittleEndian.Uint16(e[20:]))<<16 | uint32(binary.LittleEndian.Uint16(e[26:]))
			if sub < 2 {
				continue
			}
			// The second entry of a directory is "..": zero its cluster.
			dotdot := v.clusterOffset(sub) + 32
			name := make([]byte, 2)
			if _, err := f.ReadAt(name, dotdot); err != nil {
				return err
			}
			if string(name) != ".." {
				continue
			}
			zero := make([]byte, 2)
			if _, err := f.WriteAt(zero, dotdot+20); err != nil {
				return err
			}
			if _, err := f.WriteAt(zero, dotdot+26); err != nil {
				return err
			}
		}
	}
	return nil
}

func (v *fat32) writeFSInfo(f *os.File) error {
	var free, next uint32
	for c := uint32(2); c < v.clusters+2; c++ {
		if v.fat[c] == 0 {
			if free == 0 {
				next = c
			}
			free++
		}
	}
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b, free)
	binary.LittleEndian.PutUint32(b[4:], next)
	for _, sector := range []int64{v.fsInfo, v.fsInfo + 6} { // primary and backup
		if _, err := f.WriteAt(b, sector*v.bps+488); err != nil {
			return err
		}
	}
	return nil
}
