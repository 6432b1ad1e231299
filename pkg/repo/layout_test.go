package repo

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository's top, seen from this package.
const root = "../.."

// layoutRow is one row of the README's layout table.
type layoutRow struct {
	path  string   // the first cell, e.g. "pkg/node/kube/"
	names []string // the backquoted names in the second cell
}

var (
	rowRE  = regexp.MustCompile("^\\| `([^`]+)` \\| (.*) \\|$")
	nameRE = regexp.MustCompile("`([a-z][a-z0-9]*)/?`")
)

// readLayout returns the rows of the table under the README's "## Layout".
func readLayout(t *testing.T) []layoutRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Layout\n")
	require.True(t, ok, "README.md has a ## Layout section")
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []layoutRow
	for _, line := range strings.Split(section, "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r := layoutRow{path: m[1]}
		for _, n := range nameRE.FindAllStringSubmatch(m[2], -1) {
			r.names = append(r.names, n[1])
		}
		rows = append(rows, r)
	}
	require.NotEmpty(t, rows, "the layout table has rows")
	return rows
}

// hasGo reports whether dir holds a .go file.
func hasGo(t *testing.T, dir string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
			return true
		}
	}
	return false
}

// packagesBelow returns the base names of every Go package under dir, at
// any depth.
func packagesBelow(t *testing.T, dir string) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if p != dir && hasGo(t, p) {
			found[d.Name()] = true
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

// TestLayoutTableMatchesTree: every path in the README's layout table
// exists; in a row for a folder of packages (pkg/...), every package the
// row names exists beneath it, and every package or folder directly in it
// is named by the row or has a row of its own; every program under cmd/
// has a row.
func TestLayoutTableMatchesTree(t *testing.T) {
	rows := readLayout(t)
	own := map[string]bool{}
	for _, r := range rows {
		own[strings.TrimSuffix(r.path, "/")] = true
	}
	for _, r := range rows {
		dir := filepath.Join(root, r.path)
		fi, err := os.Stat(dir)
		if !assert.NoError(t, err, "the README's layout table names %s", r.path) {
			continue
		}
		if !fi.IsDir() || !strings.HasPrefix(r.path, "pkg/") {
			continue
		}
		below := packagesBelow(t, dir)
		named := map[string]bool{}
		for _, n := range r.names {
			named[n] = true
			assert.True(t, below[n], "the layout row %s names %s, which is not a package under it", r.path, n)
		}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if !e.IsDir() || e.Name() == "testdata" {
				continue
			}
			child := filepath.ToSlash(filepath.Join(strings.TrimSuffix(r.path, "/"), e.Name()))
			assert.True(t, named[e.Name()] || own[child],
				"%s is in the tree but not in the README's layout table: name it in the row for %s or give it a row", child, r.path)
		}
	}
	programs, err := os.ReadDir(filepath.Join(root, "cmd"))
	require.NoError(t, err)
	for _, p := range programs {
		assert.True(t, own["cmd/"+p.Name()], "cmd/%s has no row in the README's layout table", p.Name())
	}
	pkgs, err := os.ReadDir(filepath.Join(root, "pkg"))
	require.NoError(t, err)
	for _, p := range pkgs {
		if p.IsDir() {
			assert.True(t, own["pkg/"+p.Name()], "pkg/%s has no row in the README's layout table", p.Name())
		}
	}
}
