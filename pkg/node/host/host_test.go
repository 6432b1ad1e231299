package host

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errFake = errors.New("fake error")

func TestPath(t *testing.T) {
	for _, tc := range []struct{ root, p, want string }{
		{"/", "/etc/hostname", "/etc/hostname"},
		{"/tmp/root", "/etc/hostname", "/tmp/root/etc/hostname"},
		{"/tmp/root/", "/etc/../etc/hostname", "/tmp/root/etc/hostname"},
		{"/tmp/root", "relative", "/tmp/root/relative"},
	} {
		assert.Equal(t, tc.want, (&Host{Root: tc.root}).Path(tc.p), "Host{%q}.Path(%q)", tc.root, tc.p)
	}
}

func TestRunError(t *testing.T) {
	h := &Host{Executor: ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		return []byte("  useradd: user 'ops' already exists\n"), errFake
	})}
	err := h.Run(context.Background(), "useradd", "--create-home", "ops")
	require.ErrorIs(t, err, errFake)
	assert.EqualError(t, err, "useradd --create-home ops: fake error: useradd: user 'ops' already exists")
}

func TestOutputKeepsTheEnd(t *testing.T) {
	var long strings.Builder
	for i := range 40 {
		long.WriteString(strings.Repeat("x", i) + "\n")
	}
	h := &Host{Executor: ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		return []byte(long.String()), errFake
	})}
	out, err := h.Output(context.Background(), "kubeadm", "init")
	require.ErrorIs(t, err, errFake)
	assert.Equal(t, long.String(), out, "the whole output is returned")
	assert.Equal(t, 14, strings.Count(err.Error(), "\n"), "the error keeps the last 15 lines")
	assert.NotContains(t, err.Error(), "\n"+strings.Repeat("x", 24)+"\n")
}

func TestRealRun(t *testing.T) {
	h := Real()
	require.NoError(t, h.Run(context.Background(), "true"))
	assert.Error(t, h.Run(context.Background(), "false"))
	assert.WithinDuration(t, time.Now(), h.Now(), time.Minute)
}

// Sync runs no program on the real machine (sync(2) in process), and
// runs sync(1) through an Executor that cannot sync itself, failing as it
// does.
func TestSync(t *testing.T) {
	var ran []string
	h := Real()
	h.Executor = struct {
		ExecFunc
		Syncer
	}{ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, name)
		return nil, nil
	}), realExecutor{}}
	require.NoError(t, h.Sync(context.Background()))
	assert.Empty(t, ran, "a syncing executor starts no program")
	require.NoError(t, Real().Sync(context.Background()))

	h.Executor = ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, strings.Join(append([]string{name}, args...), " "))
		return []byte("sync: error syncing\n"), errFake
	})
	err := h.Sync(context.Background())
	require.ErrorIs(t, err, errFake)
	assert.Equal(t, []string{"sync"}, ran)
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

func TestWriteIfChanged(t *testing.T) {
	h := &Host{Root: t.TempDir()}
	wrote, err := h.WriteIfChanged("/a/b/file", []byte("one\n"), 0o640)
	require.NoError(t, err)
	assert.True(t, wrote, "first write")
	assert.Equal(t, os.FileMode(0o640), mode(t, h.Path("/a/b/file")))

	wrote, err = h.WriteIfChanged("/a/b/file", []byte("one\n"), 0o640)
	require.NoError(t, err)
	assert.False(t, wrote, "unchanged content is not written")

	// A changed file is replaced with the new mode, whatever its old one.
	require.NoError(t, os.Chmod(h.Path("/a/b/file"), 0o666))
	wrote, err = h.WriteIfChanged("/a/b/file", []byte("two\n"), 0o600)
	require.NoError(t, err)
	assert.True(t, wrote)
	b, err := os.ReadFile(h.Path("/a/b/file"))
	require.NoError(t, err)
	assert.Equal(t, "two\n", string(b))
	assert.Equal(t, os.FileMode(0o600), mode(t, h.Path("/a/b/file")))
	entries, err := os.ReadDir(h.Path("/a/b"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")

	// A file where a directory should be.
	_, err = h.WriteIfChanged("/a/b/file/x", []byte("x"), 0o644)
	assert.Error(t, err, "write below a file")
}

func TestLookupUser(t *testing.T) {
	h := &Host{Root: t.TempDir()}
	_, err := h.LookupUser("ops")
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoUser, "without /etc/passwd it is a read error")

	passwd := strings.Join([]string{
		"root:x:0:0:root:/root:/bin/bash",
		"# a comment",
		"short:x:1",
		"ops:x:1000:1001:Terrarium admin:/home/ops:/bin/bash",
		"bad:x:12a:1:x:/home/bad:/bin/sh",
		"",
	}, "\n")
	require.NoError(t, os.MkdirAll(h.Path("/etc"), 0o755))
	require.NoError(t, os.WriteFile(h.Path("/etc/passwd"), []byte(passwd), 0o644))

	u, err := h.LookupUser("ops")
	require.NoError(t, err)
	assert.Equal(t, &User{UID: 1000, GID: 1001, Home: "/home/ops"}, u)
	for _, name := range []string{"nobody", "short", "op"} { // "op": a prefix is not the name
		_, err := h.LookupUser(name)
		assert.ErrorIs(t, err, ErrNoUser, name)
	}
	_, err = h.LookupUser("bad")
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoUser)
	assert.Contains(t, err.Error(), "bad ids")
}

func TestNameTaken(t *testing.T) {
	h := &Host{Root: t.TempDir()}
	file, err := h.NameTaken("ops")
	require.NoError(t, err, "missing account files hold no names")
	assert.Empty(t, file)

	require.NoError(t, os.MkdirAll(h.Path("/etc"), 0o755))
	require.NoError(t, os.WriteFile(h.Path("/etc/passwd"), []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o644))
	require.NoError(t, os.WriteFile(h.Path("/etc/group"), []byte("root:x:0:\nsudo:x:27:\n"), 0o644))
	for name, want := range map[string]string{"root": "/etc/passwd", "sudo": "/etc/group", "ops": "", "sud": ""} {
		file, err := h.NameTaken(name)
		require.NoError(t, err)
		assert.Equal(t, want, file, name)
	}
}

func TestFilesMatch(t *testing.T) {
	h := &Host{Root: t.TempDir()}
	_, err := h.WriteIfChanged("/etc/a", []byte("a\n"), 0o644)
	require.NoError(t, err)
	_, err = h.WriteIfChanged("/etc/b", []byte("b\n"), 0o644)
	require.NoError(t, err)
	assert.NoError(t, h.FilesMatch(map[string]string{"/etc/a": "a\n", "/etc/b": "b\n"}))
	err = h.FilesMatch(map[string]string{"/etc/a": "a\n", "/etc/b": "B\n"})
	require.ErrorIs(t, err, ErrDiffers)
	assert.EqualError(t, err, "/etc/b differs from the machine config")
	assert.ErrorIs(t, h.FilesMatch(map[string]string{"/etc/missing": ""}), os.ErrNotExist)
}
