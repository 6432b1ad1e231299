package configdisk

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestZZDump(t *testing.T) {
	for _, cfg := range []string{"", "x", sampleConfig, string(make([]byte, 3000))} {
		path := filepath.Join(t.TempDir(), "c.img")
		if err := Write(path, []byte(cfg)); err != nil {
			t.Fatal(err)
		}
		img, _ := os.ReadFile(path)
		le := binary.LittleEndian
		bps := int(le.Uint16(img[11:])); spc := int(img[13]); res := int(le.Uint16(img[14:])); nf := int(img[16]); rootEnt := int(le.Uint16(img[17:])); fsz := int(le.Uint16(img[22:]))
		fmt.Printf("len=%d bps=%d spc=%d res=%d nfats=%d rootEnt=%d fatsz=%d\n", len(cfg), bps, spc, res, nf, rootEnt, fsz)
		fat := img[res*bps:]
		for i := 0; i < 8; i++ { fmt.Printf("%04x ", le.Uint16(fat[i*2:])) }
		fmt.Println()
		root := img[(res+nf*fsz)*bps:]
		for i := 0; i < 4; i++ { e := root[i*32 : i*32+32]; fmt.Printf("%q attr=%#x clus=%d size=%d\n", e[:11], e[11], le.Uint16(e[26:]), le.Uint32(e[28:])) }
	}
}
