package clustersecrets

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// fileHeader starts every saved file.
const fileHeader = `# Terrarium cluster secrets, made by ` + "`imagebuild config cluster`" + `.
# Keep this file private: it holds the cluster's CA keys and join token.
`

// Save writes s to the YAML file path with mode 0600, after checking it
// with Validate (an expired token is no reason not to save). The file is
// written to path+".partial", synced and then renamed over path, so path
// never holds a half-written file; a leftover path+".partial" is replaced.
// The parent directory is created with mode 0700 if missing. Save refuses
// to replace anything at path that is not a regular file (a directory, a
// symbolic link, ...), and leaves it untouched.
//
// Saving what Load returns gives the same bytes again.
func Save(path string, s *Secrets) error {
	if s == nil {
		return fmt.Errorf("save cluster secrets to %s: no secrets given", path)
	}
	if err := refuseNonRegular(path); err != nil {
		return fmt.Errorf("save cluster secrets to %s: %w", path, err)
	}
	data, err := encode(s)
	if err != nil {
		return fmt.Errorf("save cluster secrets to %s: %w", path, err)
	}
	if err := writeFile(path, data); err != nil {
		return fmt.Errorf("save cluster secrets to %s: %w", path, err)
	}
	return nil
}

// refuseNonRegular returns an error when something other than a regular
// file is at path.
func refuseNonRegular(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("it exists and is not a regular file but %s; refusing to replace it", describeType(fi.Mode()))
	}
	return nil
}

// describeType names the type of file m is, e.g. "a directory".
func describeType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "of type " + m.Type().String()
	}
}

// encode renders s as the YAML Save writes, checking it first.
func encode(s *Secrets) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("refusing to save secrets that do not check out:\n%w", err)
	}
	c := *s
	c.CreatedAt = c.CreatedAt.UTC()
	c.BootstrapToken.Expires = c.BootstrapToken.Expires.UTC()
	var buf bytes.Buffer
	buf.WriteString(fileHeader)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// writeFile replaces path with data, mode 0600, atomically.
func writeFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// Load reads the cluster secrets file at path, decoding it strictly
// (unknown fields, wrong types, duplicate keys and a second document are
// errors) and checking it with Validate. Load does not run CheckExpiry:
// an expired bootstrap token or CA is for the caller to judge.
//
// Problems with the document are returned as a *strictyaml.FileError, one
// per line, each naming the file, the field's path and its line, e.g.
// "cluster.yaml: $.etcdCA.key: does not match the certificate in
// $.etcdCA.cert (line 40)"; errors.As finds the strictyaml.Problems in it.
func Load(path string) (*Secrets, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load cluster secrets: %w", err)
	}
	var s Secrets
	if err := strictyaml.Unmarshal(data, &s); err != nil {
		var ps strictyaml.Problems
		if errors.As(err, &ps) {
			return nil, ps.WithLines(data).WithFile(path)
		}
		return nil, fmt.Errorf("load cluster secrets %s: %w", path, err)
	}
	if ps := s.problems(true, false, time.Time{}); len(ps) > 0 {
		return nil, ps.WithLines(data).WithFile(path)
	}
	return &s, nil
}
