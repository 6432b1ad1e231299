package support

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
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
// copies nothing. It refuses before writing, naming the sizes, when dir's
// file system lacks room for the copy and a margin.
func CopyAuditLog(ctx context.Context, h *host.Host, dir, name string) (AuditCopy, error) {
	return copyAuditLog(ctx, h, dir, name, freeBytes)
}

func copyAuditLog(ctx context.Context, h *host.Host, dir, name string, free func(string) (uint64, error)) (AuditCopy, error) {
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
	var total int64
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue // rotated away since the listing, or not a log
		}
		files = append(files, file{e.Name(), fi.Size()})
		total += fi.Size()
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	room, err := free(h.Path(dir))
	if err != nil {
		return AuditCopy{}, fmt.Errorf("the free space on %s: %w", dir, err)
	}
	if uint64(total)+auditCopyMargin > room {
		return AuditCopy{}, fmt.Errorf("the audit log (%d files, %d bytes) does not fit on the stick (%d bytes free, %d kept free): use a larger stick",
			len(files), total, room, auditCopyMargin)
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
	return c, syncDir(h.Path(out))
}

// copyPrefix copies the first size bytes of src (the size it had when
// listed: the API server appends to the file it writes) to a new file
// dst, synced.
func copyPrefix(src, dst string, size int64) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(in, size))
	if err == nil {
		err = out.Sync()
	}
	return n, errors.Join(err, out.Close())
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// freeBytes is what an unprivileged writer may still write on the file
// system of dir.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
