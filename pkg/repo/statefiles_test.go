package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

const layoutImport = "github.com/terrarium-os/terrarium/pkg/contract/layout"

// stateFileOwners names, for each layout constant of a file in firstboot's
// directory on TERRA-STATE, the packages whose code may name it:
// pkg/node/config/nodestate, the owner of firstboot's files, and the
// documented exception, the image unpack window's own file (nodestate's
// package doc lists them).
func stateFileOwners() map[string][]string {
	const owner = "pkg/node/config/nodestate"
	return map[string][]string{
		"StateTerrarium":      {owner},
		"StateJournal":        {owner},
		"StateNodeConfig":     {owner},
		"StateMarkerFile":     {owner},
		"StateResetRequest":   {owner},
		"StateUpgradeRequest": {owner},
		"StateUpgradeResult":  {owner},
		"StateUnpackWindow":   {"pkg/node/images/unpackwindow"},
	}
}

// goSources returns the repository's Go files outside tests, testdata and
// the nested modules of components/, by their slash path from the top.
func goSources(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
			case d.Name() == "testdata", strings.HasPrefix(d.Name(), "."), rel == "components", rel == "out":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// TestStateFilesHaveOneOwner: nothing but the owner of firstboot's files on
// TERRA-STATE (and the documented exception) names their layout
// constants or spells their paths out, so that nothing else opens them.
func TestStateFilesHaveOneOwner(t *testing.T) {
	owners := stateFileOwners()
	stateDir := layout.StateMount + "/" + layout.StateTerrarium
	seen := map[string]bool{}
	for _, rel := range goSources(t) {
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if pkg == "pkg/contract/layout" {
			continue // where they are defined
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, 0)
		require.NoError(t, err)
		name := ""
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == layoutImport {
				name = "layout"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok || name == "" || x.Name != name {
					return true
				}
				allowed, guarded := owners[n.Sel.Name]
				if !guarded {
					return true
				}
				if slices.Contains(allowed, pkg) {
					seen[n.Sel.Name] = true
					return true
				}
				t.Errorf("%s: %s.%s: a file of firstboot's on TERRA-STATE is %s's; use its accessors",
					fset.Position(n.Pos()), name, n.Sel.Name, strings.Join(allowed, ", "))
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(n.Value); err == nil && strings.Contains(s, stateDir) {
					t.Errorf("%s: %q spells out a path in %s, whose files are pkg/node/config/nodestate's", fset.Position(n.Pos()), s, stateDir)
				}
			}
			return true
		})
	}
	for c := range owners {
		assert.True(t, seen[c], "no owner of layout.%s names it: is this test still looking?", c)
	}
}
