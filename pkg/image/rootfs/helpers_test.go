package rootfs

import (
	"archive/tar"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// epoch is the fixed build time of the tests.
var epoch = time.Unix(1767225600, 0)

// discard is a logger whose output no test reads.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s not found: run make deps", name)
	return p
}

// entry is one member of a test tarball. A name ending in "/" is a
// directory; a non-empty link makes a symlink.
type entry struct {
	name    string
	content string
	mode    int64
	link    string
}

func tDir(name string) entry             { return entry{name: name, mode: 0o755} }
func tFile(name, content string) entry   { return entry{name: name, content: content, mode: 0o644} }
func tExe(name, content string) entry    { return entry{name: name, content: content, mode: 0o755} }
func tSymlink(name, target string) entry { return entry{name: name, link: target, mode: 0o777} }

// writeTar writes entries to path the way mmdebstrap does: every member
// named "./...", owned by root.
func writeTar(t *testing.T, path string, entries []entry) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	tw := tar.NewWriter(f)
	for _, e := range entries {
		h := &tar.Header{Name: "./" + strings.TrimPrefix(e.name, "./"), Mode: e.mode, ModTime: epoch, Format: tar.FormatGNU}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.content))
		}
		require.NoError(t, tw.WriteHeader(h), e.name)
		if h.Typeflag == tar.TypeReg {
			_, err := io.WriteString(tw, e.content)
			require.NoError(t, err, e.name)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, f.Close())
}

// writeFiles writes name -> content under root (mode 0644) and returns root.
func writeFiles(t *testing.T, root string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

// readFile returns a file's content, failing the test when it is missing.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
