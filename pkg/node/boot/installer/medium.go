// Package installer writes Terrarium from the hybrid ISO a node booted
// live from onto one of its disks: it picks the target the machine config's
// install section selects (never the boot medium), verifies the medium's
// files against their sha256 before writing anything, writes the disk
// image's head (GPT and EFI partition) and the slot, gives the copy fresh
// GUIDs and a TERRA-STATE seeded with the node's enrollment, reads the
// slot back from the disk to check it, and makes the disk the firmware's
// first boot option.
package installer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Medium is the ISO's filesystem, mounted at Dir.
type Medium struct {
	Dir string
}

// File returns the host path of one of the ISO's files (layout.ISO*File).
func (m Medium) File(name string) string { return filepath.Join(m.Dir, filepath.FromSlash(name)) }

// maxSumsSize bounds SHA256SUMS: a few lines.
const maxSumsSize = 64 << 10

// ParseSums reads a sha256sum-format list: name -> lower-case hex. Every
// line must be "<64 hex digits>  <name>" (or " *<name>"); a name listed
// twice is an error.
func ParseSums(b []byte) (map[string]string, error) {
	if len(b) > maxSumsSize {
		return nil, fmt.Errorf("%s is %d bytes, more than a list of sums", layout.ISOSumsFile, len(b))
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimPrefix(name, " "), "*")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 || name == "" || strings.ContainsAny(name, "/\\") {
			return nil, fmt.Errorf("%s line %d: want \"<sha256 hex>  <file name>\", got %q", layout.ISOSumsFile, i+1, line)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s line %d: %s is listed twice", layout.ISOSumsFile, i+1, name)
		}
		out[name] = strings.ToLower(sum)
	}
	return out, nil
}

// ErrMediumCorrupt means a file on the medium does not match its sha256.
var ErrMediumCorrupt = errors.New("the installation medium is corrupt")

// Verify hashes the head and the slot against SHA256SUMS and returns the
// sums (name -> hex).
func (m Medium) Verify(ctx context.Context, report func(string)) (map[string]string, error) {
	b, err := readCapped(m.File(layout.ISOSumsFile), maxSumsSize)
	if err != nil {
		return nil, err
	}
	sums, err := ParseSums(b)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{layout.ISOHeadFile, layout.ISOSlotFile} {
		want, ok := sums[path.Base(f)]
		if !ok {
			return nil, fmt.Errorf("%s lists no %s: the medium is not a Terrarium installer ISO", layout.ISOSumsFile, path.Base(f))
		}
		report(fmt.Sprintf("verifying %s on the medium", f))
		got, err := hashFile(ctx, m.File(f))
		if err != nil {
			return nil, err
		}
		if got != want {
			return nil, fmt.Errorf("%w: %s has sha256 %s, %s says %s (write the ISO again, and check it against manifest.json)", ErrMediumCorrupt, f, got, layout.ISOSumsFile, want)
		}
	}
	return sums, nil
}

func readCapped(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, limit)
	}
	return b, nil
}

func hashFile(ctx context.Context, p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return hashReader(ctx, f, -1)
}

// hashReader hashes r (n bytes of it; all of it when n < 0), checking ctx
// between chunks.
func hashReader(ctx context.Context, r io.Reader, n int64) (string, error) {
	if n >= 0 {
		r = io.LimitReader(r, n)
	}
	h := sha256.New()
	buf := make([]byte, 4<<20)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		k, err := r.Read(buf)
		h.Write(buf[:k])
		total += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	if n >= 0 && total != n {
		return "", fmt.Errorf("read %d bytes of %d", total, n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
