// Package node holds what runs on the appliance. This file only tests the
// rule that keeps the two sides apart.
package node

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNodeImportsNoBuildSide: nothing that runs on the appliance imports
// the build side (pkg/image) or the cluster generator (pkg/cluster); the
// two sides share only pkg/contract. Tests may use them to make fixtures.
func TestNodeImportsNoBuildSide(t *testing.T) {
	const module = "github.com/terrarium-os/terrarium/pkg/"
	files := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		require.NoError(t, err)
		files++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			for _, side := range []string{"image/", "cluster/", "testvm/"} {
				assert.False(t, strings.HasPrefix(path, module+side), "pkg/node/%s imports %s", p, path)
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, files, 50, "walked pkg/node")
}
