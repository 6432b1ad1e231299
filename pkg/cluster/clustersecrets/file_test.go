package clustersecrets

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	return fi.Mode()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

func TestSaveLoadRoundTrip(t *testing.T) {
	s := sharedSecrets(t)
	dir := filepath.Join(t.TempDir(), "new", "dir")
	path := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, Save(path, &s))
	assert.Equal(t, fs.FileMode(0o600), mode(t, path), "file mode, want 0600")
	m := mode(t, dir)
	assert.True(t, m.IsDir(), "directory mode %v, want drwx------", m)
	assert.Equal(t, fs.FileMode(0o700), m.Perm(), "directory mode %v, want drwx------", m)
	assert.False(t, exists(path+".partial"), "%s.partial left behind", path)
	first, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, field := range []string{
		"apiVersion: terrarium.dev/v1alpha1\n", "kind: ClusterSecrets\n", "clusterName: terrarium-test\n",
		"createdAt: 2026-03-14T15:09:26Z\n", "\nca:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n", "\n  key: |\n    -----BEGIN EC PRIVATE KEY-----\n",
		"\nfrontProxyCA:\n", "\netcdCA:\n", "\nserviceAccount:\n  key: |\n    -----BEGIN RSA PRIVATE KEY-----\n",
		"\n  pub: |\n    -----BEGIN PUBLIC KEY-----\n", "\nbootstrapToken:\n  id: ", "\n  secret: ",
		"\n  expires: 2026-03-15T15:09:26Z\n", "\ncertificateKey: ",
		"\nsigningKey: |\n  -----BEGIN PRIVATE KEY-----\n",
	} {
		assert.Contains(t, string(first), field, "saved file lacks the field")
	}

	loaded, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, s, *loaded, "Load(Save(s)) != s")
	path2 := filepath.Join(dir, "again.yaml")
	require.NoError(t, Save(path2, loaded))
	second, err := os.ReadFile(path2)
	require.NoError(t, err)
	assert.Equal(t, string(first), string(second), "Save(Load(Save(s))) differs from Save(s)")

	// Times in another zone are saved in UTC, and still round-trip.
	zoned := s
	zoned.CreatedAt = s.CreatedAt.In(time.FixedZone("x", -7*3600))
	require.NoError(t, Save(path2, &zoned))
	third, _ := os.ReadFile(path2)
	assert.Equal(t, string(first), string(third), "a zoned CreatedAt saves differently")
}

func TestSaveReplaces(t *testing.T) {
	s := sharedSecrets(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	require.NoError(t, Save(path, &s))
	assert.Equal(t, fs.FileMode(0o600), mode(t, path), "file mode, want 0600")
	entries, _ := os.ReadDir(dir)
	assert.Len(t, entries, 1, "temporary files left behind")
	_, err := Load(path)
	assert.NoError(t, err, "Load")
}

func TestSaveRefusesNonRegular(t *testing.T) {
	s := sharedSecrets(t)
	dir := t.TempDir()

	asDir := filepath.Join(dir, "secrets.yaml")
	require.NoError(t, os.MkdirAll(filepath.Join(asDir, "inside"), 0o755))
	err := Save(asDir, &s)
	assert.ErrorContains(t, err, "not a regular file", "Save over a directory")
	assert.ErrorContains(t, err, asDir, "Save over a directory")
	assert.True(t, mode(t, asDir).IsDir(), "Save touched the directory")
	assert.True(t, exists(filepath.Join(asDir, "inside")), "Save touched the directory")

	target := filepath.Join(dir, "target.yaml")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o600))
	link := filepath.Join(dir, "link.yaml")
	require.NoError(t, os.Symlink(target, link))
	assert.ErrorContains(t, Save(link, &s), "not a regular file", "Save over a symlink")
	got, _ := os.ReadFile(target)
	assert.Equal(t, "keep", string(got), "Save touched the symlink's target")
	assert.NotZero(t, mode(t, link)&fs.ModeSymlink, "Save touched the symlink")
	for _, p := range []string{asDir, link} {
		assert.False(t, exists(p+".partial"), "%s.partial created", p)
	}
}

func TestSaveRefusesInvalid(t *testing.T) {
	s := sharedSecrets(t)
	s.EtcdCA.Key = s.CA.Key
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	err := Save(path, &s)
	var ps strictyaml.Problems
	assert.ErrorAs(t, err, &ps)
	assert.ErrorContains(t, err, "$.etcdCA.key")
	assert.False(t, exists(path), "invalid secrets were written")
	assert.False(t, exists(path+".partial"), "invalid secrets were written")
	assert.Error(t, Save(path, nil), "Save(nil) succeeded")

	// An expired token is no reason not to save.
	s = sharedSecrets(t)
	s.BootstrapToken.Expires = testNow.Add(-time.Hour)
	assert.NoError(t, Save(path, &s), "Save with an expired token")
}

// writeRaw saves s without any checks, for Load to find the problems.
func writeRaw(t *testing.T, s *Secrets) string {
	t.Helper()
	data, err := yaml.Marshal(s)
	require.NoError(t, err)
	return writeText(t, string(data))
}

func writeText(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// savedText returns the shared secrets as Save writes them.
func savedText(t *testing.T) string {
	t.Helper()
	s := sharedSecrets(t)
	data, err := encode(&s)
	require.NoError(t, err)
	return string(data)
}

func TestLoadUnknownField(t *testing.T) {
	text := savedText(t)
	text = strings.Replace(text, "bootstrapToken:\n", "bootstrapToken:\n  ttl: 24h\n", 1)
	text += "extra: 1\n"
	path := writeText(t, text)
	_, err := Load(path)
	lines := problemLines(t, err)
	require.Len(t, lines, 2, "want 2 problems:\n%v", err)
	for i, want := range []string{"$.bootstrapToken.ttl: unknown field", "$.extra: unknown field"} {
		assert.True(t, strings.HasPrefix(lines[i], path+": "), "problem %q does not name file %s", lines[i], path)
		assert.Contains(t, lines[i], want, "problem does not name the field")
		assert.Contains(t, lines[i], "(line ", "problem does not name the line")
	}
	var fe *strictyaml.FileError
	require.ErrorAs(t, err, &fe, "error is not a FileError")
	assert.Equal(t, path, fe.File, "error is not a FileError for the file")
}

func TestLoadBadPEM(t *testing.T) {
	good := sharedSecrets(t)
	other, err := Generate("other", testNow, time.Hour, nil)
	require.NoError(t, err)
	s := good
	s.CA.Cert = good.CA.Cert[:len(good.CA.Cert)-40] // truncated
	s.EtcdCA.Key = other.EtcdCA.Key                 // a different pair's key
	path := writeRaw(t, &s)
	_, err = Load(path)
	lines := problemLines(t, err)
	require.Len(t, lines, 2, "want 2 problems:\n%v", err)
	for i, want := range []string{path + ": $.ca.cert: is not valid PEM", path + ": $.etcdCA.key: does not match the certificate in $.etcdCA.cert"} {
		assert.True(t, strings.HasPrefix(lines[i], want), "problem %q, want %q", lines[i], want)
		assert.Contains(t, lines[i], "(line ", "problem without a line")
	}

	// Garbled base64 inside an intact PEM frame.
	s = good
	s.FrontProxyCA.Cert = strings.Replace(good.FrontProxyCA.Cert, "\n", "\n!!!", 2)
	_, err = Load(writeRaw(t, &s))
	lines = problemLines(t, err)
	require.Len(t, lines, 1, "garbled PEM: %v", err)
	assert.Contains(t, lines[0], "$.frontProxyCA.cert:", "garbled PEM")
}

func TestLoadExpiredToken(t *testing.T) {
	s := sharedSecrets(t)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, Save(path, &s))
	// The token made at testNow with a 24h TTL has long expired by now:
	// Load leaves that to the caller.
	loaded, err := Load(path)
	require.NoError(t, err, "Load failed on an expired token")
	err = loaded.CheckExpiry(time.Now())
	wantProblems(t, err, []string{"$.bootstrapToken.expires:", "expired at 2026-03-15T15:09:26Z", "imagebuild config cluster --rotate-token"})
}

func TestLoadOther(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err, "missing file")
	assert.ErrorIs(t, err, fs.ErrNotExist, "missing file")
	assert.True(t, strings.HasPrefix(err.Error(), "load cluster secrets: "), "missing file: %v", err)
	text := savedText(t)
	for name, tc := range map[string]struct{ text, want string }{
		"empty":       {"", "$: document is empty"},
		"wrong type":  {strings.Replace(text, "ca:\n", "ca: 12\nx:\n", 1), "$.ca:"},
		"second doc":  {text + "---\nkind: x\n", "second YAML document"},
		"wrong kind":  {strings.Replace(text, "kind: ClusterSecrets", "kind: Machine", 1), `$.kind: is "Machine"`},
		"bad created": {strings.Replace(text, "createdAt: 2026-03-14T15:09:26Z", "createdAt: yesterday", 1), "$.createdAt:"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeText(t, tc.text))
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
