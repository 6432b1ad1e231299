package kubeadmflow

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadAhead(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.WriteFile(a, make([]byte, 3<<20+5), 0o755))
	require.NoError(t, os.WriteFile(b, []byte("plugin"), 0o755))

	assert.Equal(t, int64(3<<20+5+6), readAhead(context.Background(), []string{a, filepath.Join(dir, "missing"), b}),
		"every byte of each file there, a missing one skipped")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Zero(t, readAhead(ctx, []string{a, b}), "nothing read once the wait it overlaps has ended")

	// fn's result is whileReadingAhead's, and the warm-up has stopped by
	// its return (no goroutine left reading).
	want := errors.New("the API answered no")
	assert.ErrorIs(t, whileReadingAhead(context.Background(), []string{a, b}, func() error { return want }), want)
}

func TestReadAheadPrograms(t *testing.T) {
	f := testFlow(t, nil)
	paths := readAheadPrograms(f)
	require.NotEmpty(t, paths)
	assert.Equal(t, f.Path("/usr/bin/kubelet"), paths[0], "the kubelet first: the next step starts it")
	assert.Contains(t, paths, f.Path("/usr/lib/cni/flannel"))
}
