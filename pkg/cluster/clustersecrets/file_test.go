package clustersecrets

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := Save(path, &s); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("file mode %v, want 0600", m)
	}
	if m := mode(t, dir); m.Perm() != 0o700 || !m.IsDir() {
		t.Errorf("directory mode %v, want drwx------", m)
	}
	if exists(path + ".partial") {
		t.Errorf("%s.partial left behind", path)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{
		"apiVersion: terrarium.dev/v1alpha1\n", "kind: ClusterSecrets\n", "clusterName: terrarium-test\n",
		"createdAt: 2026-03-14T15:09:26Z\n", "\nca:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n", "\n  key: |\n    -----BEGIN EC PRIVATE KEY-----\n",
		"\nfrontProxyCA:\n", "\netcdCA:\n", "\nserviceAccount:\n  key: |\n    -----BEGIN RSA PRIVATE KEY-----\n",
		"\n  pub: |\n    -----BEGIN PUBLIC KEY-----\n", "\nbootstrapToken:\n  id: ", "\n  secret: ",
		"\n  expires: 2026-03-15T15:09:26Z\n", "\ncertificateKey: ",
		"\nsigningKey: |\n  -----BEGIN PRIVATE KEY-----\n",
	} {
		if !bytes.Contains(first, []byte(field)) {
			t.Errorf("saved file lacks %q:\n%s", field, first)
		}
	}

	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*loaded, s) {
		t.Errorf("Load(Save(s)) != s:\n%+v\n%+v", *loaded, s)
	}
	path2 := filepath.Join(dir, "again.yaml")
	if err := Save(path2, loaded); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(path2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Errorf("Save(Load(Save(s))) differs from Save(s):\n%s\n---\n%s", first, second)
	}

	// Times in another zone are saved in UTC, and still round-trip.
	zoned := s
	zoned.CreatedAt = s.CreatedAt.In(time.FixedZone("x", -7*3600))
	if err := Save(path2, &zoned); err != nil {
		t.Fatal(err)
	}
	if third, _ := os.ReadFile(path2); !bytes.Equal(first, third) {
		t.Errorf("a zoned CreatedAt saves differently:\n%s", third)
	}
}

func TestSaveReplaces(t *testing.T) {
	s := sharedSecrets(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Save(path, &s); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("file mode %v, want 0600", m)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if _, err := Load(path); err != nil {
		t.Errorf("Load: %v", err)
	}
}

func TestSaveRefusesNonRegular(t *testing.T) {
	s := sharedSecrets(t)
	dir := t.TempDir()

	asDir := filepath.Join(dir, "secrets.yaml")
	if err := os.MkdirAll(filepath.Join(asDir, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := Save(asDir, &s)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), asDir) {
		t.Errorf("Save over a directory: err = %v", err)
	}
	if m := mode(t, asDir); !m.IsDir() || !exists(filepath.Join(asDir, "inside")) {
		t.Errorf("Save touched the directory")
	}

	target := filepath.Join(dir, "target.yaml")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Save(link, &s); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Save over a symlink: err = %v", err)
	}
	if got, _ := os.ReadFile(target); string(got) != "keep" || mode(t, link)&fs.ModeSymlink == 0 {
		t.Errorf("Save touched the symlink or its target")
	}
	for _, p := range []string{asDir, link} {
		if exists(p + ".partial") {
			t.Errorf("%s.partial created", p)
		}
	}
}

func TestSaveRefusesInvalid(t *testing.T) {
	s := sharedSecrets(t)
	s.EtcdCA.Key = s.CA.Key
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	err := Save(path, &s)
	var ps strictyaml.Problems
	if err == nil || !errors.As(err, &ps) || !strings.Contains(err.Error(), "$.etcdCA.key") {
		t.Errorf("err = %v", err)
	}
	if exists(path) || exists(path+".partial") {
		t.Errorf("invalid secrets were written")
	}
	if err := Save(path, nil); err == nil {
		t.Errorf("Save(nil) succeeded")
	}

	// An expired token is no reason not to save.
	s = sharedSecrets(t)
	s.BootstrapToken.Expires = testNow.Add(-time.Hour)
	if err := Save(path, &s); err != nil {
		t.Errorf("Save with an expired token: %v", err)
	}
}

// writeRaw saves s without any checks, for Load to find the problems.
func writeRaw(t *testing.T, s *Secrets) string {
	t.Helper()
	data, err := yaml.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return writeText(t, string(data))
}

func writeText(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// savedText returns the shared secrets as Save writes them.
func savedText(t *testing.T) string {
	t.Helper()
	s := sharedSecrets(t)
	data, err := encode(&s)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestLoadUnknownField(t *testing.T) {
	text := savedText(t)
	text = strings.Replace(text, "bootstrapToken:\n", "bootstrapToken:\n  ttl: 24h\n", 1)
	text += "extra: 1\n"
	path := writeText(t, text)
	_, err := Load(path)
	lines := problemLines(t, err)
	if len(lines) != 2 {
		t.Fatalf("want 2 problems:\n%v", err)
	}
	for i, want := range []string{"$.bootstrapToken.ttl: unknown field", "$.extra: unknown field"} {
		if !strings.HasPrefix(lines[i], path+": ") || !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "(line ") {
			t.Errorf("problem %q does not name file %s, field %q and line", lines[i], path, want)
		}
	}
	var fe *strictyaml.FileError
	if !errors.As(err, &fe) || fe.File != path {
		t.Errorf("error is not a FileError for %s: %#v", path, err)
	}
}

func TestLoadBadPEM(t *testing.T) {
	good := sharedSecrets(t)
	other, err := Generate("other", testNow, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := good
	s.CA.Cert = good.CA.Cert[:len(good.CA.Cert)-40] // truncated
	s.EtcdCA.Key = other.EtcdCA.Key                 // a different pair's key
	path := writeRaw(t, &s)
	_, err = Load(path)
	lines := problemLines(t, err)
	if len(lines) != 2 {
		t.Fatalf("want 2 problems:\n%v", err)
	}
	for i, want := range []string{path + ": $.ca.cert: is not valid PEM", path + ": $.etcdCA.key: does not match the certificate in $.etcdCA.cert"} {
		if !strings.HasPrefix(lines[i], want) || !strings.Contains(lines[i], "(line ") {
			t.Errorf("problem %q, want %q with a line", lines[i], want)
		}
	}

	// Garbled base64 inside an intact PEM frame.
	s = good
	s.FrontProxyCA.Cert = strings.Replace(good.FrontProxyCA.Cert, "\n", "\n!!!", 2)
	_, err = Load(writeRaw(t, &s))
	if lines := problemLines(t, err); len(lines) != 1 || !strings.Contains(lines[0], "$.frontProxyCA.cert:") {
		t.Errorf("garbled PEM: %v", err)
	}
}

func TestLoadExpiredToken(t *testing.T) {
	s := sharedSecrets(t)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := Save(path, &s); err != nil {
		t.Fatal(err)
	}
	// The token made at testNow with a 24h TTL has long expired by now:
	// Load leaves that to the caller.
	loaded, err := Load(path)
	if err != nil {
		t.Fatalf("Load failed on an expired token: %v", err)
	}
	err = loaded.CheckExpiry(time.Now())
	wantProblems(t, err, []string{"$.bootstrapToken.expires:", "expired at 2026-03-15T15:09:26Z", "imagebuild config cluster --rotate-token"})
}

func TestLoadOther(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "load cluster secrets: ") {
		t.Errorf("missing file: %v", err)
	}
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
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
