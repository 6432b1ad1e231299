package cache

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A tree given as a symbolic link hashes as the tree it points to, and
// follows what changes behind the link.
func TestKeyTreeThroughALink(t *testing.T) {
	tree := makeTree(t)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(tree, link))
	direct := mustSum(t, NewKey("k").Tree("overlay", tree))
	linked := mustSum(t, NewKey("k").Tree("overlay", link))
	assert.Equal(t, direct, linked)

	write(t, filepath.Join(tree, "sub", "added"), "new\n", 0o644)
	assert.NotEqual(t, linked, mustSum(t, NewKey("k").Tree("overlay", link)), "a change behind the link changes the key")
}
