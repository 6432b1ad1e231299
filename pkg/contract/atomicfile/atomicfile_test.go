package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	names := make([]string, 0, len(es))
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFile(t *testing.T) {
	// The mode is set with chmod: a umask that would clear bits does not.
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	for _, tc := range []struct {
		name     string
		existing []byte // nil: no file before
		perm     os.FileMode
	}{
		{name: "new file", perm: 0o644},
		{name: "group-writable despite umask", perm: 0o664},
		{name: "owner only", perm: 0o600},
		{name: "replaces a file", existing: []byte("old content, longer than the new"), perm: 0o640},
		{name: "replaces a read-only file", existing: []byte("old"), perm: 0o444},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if tc.existing != nil {
				require.NoError(t, os.WriteFile(path, tc.existing, 0o400))
			}
			require.NoError(t, WriteFile(path, []byte("new"), tc.perm))
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, "new", string(got))
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, tc.perm, fi.Mode().Perm())
			assert.Equal(t, []string{"f"}, entries(t, dir), "no temporary file is left")
		})
	}
}

func TestWriteStreams(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	err := Write(path, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(want))
		return err
	})
	require.NoError(t, err)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []string{"f"}, entries(t, dir))
}

func TestWriteFillFails(t *testing.T) {
	errFill := errors.New("fill failed")
	for _, tc := range []struct {
		name     string
		existing bool
	}{
		{name: "no file before"},
		{name: "file before is kept", existing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			want := []string{}
			if tc.existing {
				require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
				want = []string{"f"}
			}
			err := Write(path, 0o644, func(w io.Writer) error {
				if _, err := w.Write([]byte("half")); err != nil {
					return err
				}
				return errFill
			})
			require.Error(t, err)
			assert.ErrorIs(t, err, errFill)
			assert.Contains(t, err.Error(), path)
			assert.Equal(t, want, entries(t, dir), "the temporary file is removed")
			if tc.existing {
				got, err := os.ReadFile(path)
				require.NoError(t, err)
				assert.Equal(t, "old", string(got))
			}
		})
	}
}

func TestWriteFillPanics(t *testing.T) {
	dir := t.TempDir()
	assert.Panics(t, func() {
		_ = Write(filepath.Join(dir, "f"), 0o644, func(io.Writer) error { panic("boom") })
	})
	assert.Empty(t, entries(t, dir), "the temporary file is removed")
}

func TestMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "missing", "f")
	for name, write := range map[string]func() error{
		"WriteFile": func() error { return WriteFile(path, []byte("x"), 0o644) },
		"Write":     func() error { return Write(path, 0o644, func(io.Writer) error { return nil }) },
		"Replace":   func() error { return Replace(filepath.Join(dir, "missing", "tmp"), path) },
	} {
		t.Run(name, func(t *testing.T) {
			err := write()
			require.Error(t, err)
			assert.ErrorIs(t, err, fs.ErrNotExist)
			var pe *os.PathError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, path, pe.Path)
			assert.Contains(t, err.Error(), path)
			assert.NoDirExists(t, filepath.Join(dir, "missing"), "parents are not created")
		})
	}
	err := SyncDir(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), filepath.Join(dir, "missing"))
}

// TestConcurrentWriters has writers replace one path at once while readers
// read it: every read, and the file left at the end, is one writer's
// complete content.
func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	const writers, size = 8, 256 << 10
	content := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, size) }
	require.NoError(t, WriteFile(path, content(0), 0o644))
	isWhole := func(b []byte) bool {
		return len(b) == size && bytes.Count(b, b[:1]) == size
	}

	var wg sync.WaitGroup
	errs := make(chan error, writers*2)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := os.ReadFile(path)
				if err == nil && !isWhole(b) {
					err = fmt.Errorf("read a partial file of %d bytes", len(b))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range writers {
		wg.Go(func() {
			for range 5 {
				if err := WriteFile(path, content(i), 0o644); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, isWhole(got), "the file is one writer's content")
	assert.Equal(t, []string{"f"}, entries(t, dir), "no temporary file is left")
}

func TestReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.img")
	tmp := path + ".partial"
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	require.NoError(t, os.WriteFile(tmp, []byte("made by a tool"), 0o600))

	require.NoError(t, Replace(tmp, path))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "made by a tool", string(got))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the mode is the tool's")
	assert.Equal(t, []string{"out.img"}, entries(t, dir))
}

func TestReplaceFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	require.NoError(t, os.MkdirAll(filepath.Join(path, "child"), 0o755))
	tmp := filepath.Join(dir, "out.partial")
	require.NoError(t, os.WriteFile(tmp, []byte("x"), 0o644))

	err := Replace(tmp, path) // a file cannot replace a directory
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.NotErrorIs(t, err, ErrNotDurable)
	assert.NoFileExists(t, tmp, "tmp is removed")
	assert.DirExists(t, filepath.Join(path, "child"), "path is left as it was")
}

func TestSyncDir(t *testing.T) {
	assert.NoError(t, SyncDir(t.TempDir()))
}

// WriteFileUnsynced replaces as WriteFile does (whole, with its mode, no
// temporary file left); SyncFS then syncs the file system.
func TestWriteFileUnsynced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "blob")
	require.NoError(t, os.WriteFile(path, []byte("old content"), 0o600))
	require.NoError(t, WriteFileUnsynced(path, []byte("new"), 0o444))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "new", string(got))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o444), fi.Mode().Perm())
	assert.Equal(t, []string{"blob"}, entries(t, dir), "no temporary file is left")
	assert.NoError(t, SyncFS(path))

	err = WriteFileUnsynced(filepath.Join(dir, "missing", "blob"), []byte("x"), 0o444)
	var pe *os.PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, filepath.Join(dir, "missing", "blob"), pe.Path)
	assert.Error(t, SyncFS(filepath.Join(dir, "missing")))
}
