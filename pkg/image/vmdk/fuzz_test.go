package vmdk

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// FuzzRead feeds VMDKs, written ones (the seeds, made below rather than
// committed: each is over 64 KiB) and their mutations, to the tests'
// reader: it never panics and fails only with errBad, and a disk it reads,
// written again by Write, reads back the same.
func FuzzRead(f *testing.F) {
	for _, raw := range [][]byte{
		syntheticDisk(SectorSize, 1),
		syntheticDisk(3*GrainSectors*SectorSize+5*SectorSize, 2),
		make([]byte, grainBytes),
	} {
		var out bytes.Buffer
		if _, err := Write(context.Background(), &out, bytes.NewReader(raw), int64(len(raw))); err != nil {
			f.Fatal(err)
		}
		f.Add(out.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := readVMDK(data, 4*MiB)
		if err != nil {
			if !errors.Is(err, errBad) {
				t.Fatalf("error does not wrap errBad: %v", err)
			}
			return
		}
		var out bytes.Buffer
		if _, err := Write(context.Background(), &out, bytes.NewReader(p.raw), int64(len(p.raw)), WithConcurrency(2)); err != nil {
			t.Fatalf("write what was read: %v", err)
		}
		again, err := readVMDK(out.Bytes(), 4*MiB)
		if err != nil {
			t.Fatalf("read what was written: %v", err)
		}
		if !bytes.Equal(again.raw, p.raw) {
			t.Fatal("a written disk reads back different")
		}
	})
}
