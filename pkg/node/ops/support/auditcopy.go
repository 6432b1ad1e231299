package support

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// AuditCopy is what CopyAuditLog wrote.
type AuditCopy struct {
	// Dir is the directory it wrote, under the stick's; "" when the
	// node keeps no audit log.
	Dir   string
	Files int
	Bytes int64
}

// auditCopyMargin is the room CopyAuditLog leaves free on the stick.
const auditCopyMargin = 1 << 20

// CopyAuditLog copies the API server's whole audit log — the file it is
// writing and every rotated, gzipped one beside it (layout.AuditLogDir) —
// to dir/name-audit/, beside the bundle name: the bundle holds only the
// log's end. The log holds metadata only (who, what, when; never a
// body), so nothing in it is redacted. A node without one (a worker)
// copies nothing. It refuses before writing, naming the sizes
// (diskspace.Check), when dir's file system lacks room for the copy and a
// margin.
func CopyAuditLog(ctx context.Context, h *host.Host, dir, name string) (AuditCopy, error) {
	return copyAuditLog(ctx, h, dir, name, diskspace.Statfs{})
}

func copyAuditLog(ctx context.Context, h *host.Host, dir, name string, space diskspace.FS) (AuditCopy, error) {
	src := layout.AuditLogDir
	entries, err := os.ReadDir(h.Path(src))
	if errors.Is(err, fs.ErrNotExist) {
		return AuditCopy{}, nil
	}
	if err != nil {
		return AuditCopy{}, fmt.Errorf("the audit log: %w", hostPathError(err, src))
	}
	type file struct {
		name string
		size int64
	}
	var files []file
	var total uint64
	for _, e := range entries { // sorted by name
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue // rotated away since the listing, or not a log
		}
		files = append(files, file{e.Name(), fi.Size()})
		total += uint64(fi.Size()) //nolint:gosec // a regular file's size is not negative
	}
	if err := diskspace.Check(space, diskspace.Need{
		What:  fmt.Sprintf("the audit log (%d files)", len(files)),
		Path:  h.Path(dir),
		Bytes: total + auditCopyMargin,
		Fix:   "use a larger stick",
	}); err != nil {
		return AuditCopy{}, err
	}
	out := filepath.Join(dir, name+"-audit")
	if err := os.MkdirAll(h.Path(out), 0o700); err != nil {
		return AuditCopy{}, fmt.Errorf("the audit log's copy: %w", err)
	}
	c := AuditCopy{Dir: out}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		n, err := copyPrefix(h.Path(filepath.Join(src, f.name)), h.Path(filepath.Join(out, f.name)), f.size)
		if errors.Is(err, fs.ErrNotExist) {
			continue // rotated (renamed and compressed) since the listing
		}
		if err != nil {
			return c, fmt.Errorf("copy %s/%s: %w", src, f.name, err)
		}
		c.Files++
		c.Bytes += n
	}
	return c, nil
}

// copyPrefix copies the first size bytes of src (the size it had when
// listed: the API server appends to the file it writes) to dst, synced
// (atomicfile.Write).
func copyPrefix(src, dst string, size int64) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	var n int64
	err = atomicfile.Write(dst, 0o600, func(w io.Writer) error {
		var cerr error
		n, cerr = io.Copy(w, io.LimitReader(in, size))
		return cerr
	})
	return n, err
}
