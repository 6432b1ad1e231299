// Package contract holds what the build side and the node both read. This
// file only tests the rule that keeps it shared.
package contract

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

// TestContractImportsOnlyContract: pkg/contract is what both sides share,
// so it imports nothing of this module outside pkg/contract — neither the
// build side (pkg/image, pkg/cluster) nor the node (pkg/node), whose code
// the other side would then carry. Tests may use them to make fixtures.
func TestContractImportsOnlyContract(t *testing.T) {
	const (
		module   = "github.com/terrarium-os/terrarium/"
		contract = module + "pkg/contract/"
	)
	files := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		require.NoError(t, err)
		files++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			if strings.HasPrefix(path, module) {
				assert.True(t, strings.HasPrefix(path, contract), "pkg/contract/%s imports %s", p, path)
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, files, 30, "walked pkg/contract")
}
