package configdisk

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"
)

// freeRootCluster fixes the volume label entry's times (see below) and
// undoes a go-diskfs FAT16 quirk that fsck.fat reports
// ("Reclaimed 1 unused cluster"): it marks cluster 2 as used for the root
// directory, which on FAT12/16 lives outside the data area. The entry is
// cleared in every FAT copy when no root entry starts at cluster 2.
func freeRootCluster(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	bs := make([]byte, 512)
	if _, err := f.ReadAt(bs, 0); err != nil {
		return err
	}
	le := binary.LittleEndian
	bps, reserved, nfats := int64(le.Uint16(bs[11:])), int64(le.Uint16(bs[14:])), int64(bs[16])
	rootEntries, fatSize := int64(le.Uint16(bs[17:])), int64(le.Uint16(bs[22:]))
	if bps == 0 || fatSize == 0 {
		return fmt.Errorf("not a FAT16 boot sector")
	}
	root := make([]byte, rootEntries*32)
	if _, err := f.ReadAt(root, (reserved+nfats*fatSize)*bps); err != nil {
		return err
	}
	rootOff := (reserved + nfats*fatSize) * bps
	inUse := false
	for off := 0; off+32 <= len(root); off += 32 {
		e := root[off : off+32]
		if e[0] == 0 {
			break
		}
		if e[0] != 0xE5 && e[11] == 0x08 {
			// The volume label's entry carries its creation time, which
			// Chtimes cannot reach: the disk's one fixed time instead.
			d, t := fatDateTime(fileTime)
			for _, at := range []int{14, 22} {
				le.PutUint16(e[at:], t)
				le.PutUint16(e[at+2:], d)
			}
			e[13] = 0
			le.PutUint16(e[18:], d)
			if _, err := f.WriteAt(e, rootOff+int64(off)); err != nil {
				return err
			}
			continue
		}
		if e[0] != 0xE5 && e[11] != 0x0F && le.Uint16(e[26:]) == 2 {
			inUse = true // cluster 2 is really in use
		}
	}
	if inUse {
		return f.Sync()
	}
	for i := int64(0); i < nfats; i++ {
		if _, err := f.WriteAt([]byte{0, 0}, (reserved+i*fatSize)*bps+2*2); err != nil {
			return err
		}
	}
	return f.Sync()
}

// fatDateTime encodes t as FAT's date and time fields.
func fatDateTime(t time.Time) (date, tod uint16) {
	date = uint16((t.Year()-1980)<<9 | int(t.Month())<<5 | t.Day())
	tod = uint16(t.Hour()<<11 | t.Minute()<<5 | t.Second()/2)
	return date, tod
}
