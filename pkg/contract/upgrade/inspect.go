package upgrade

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// Inspect prints the upgrade file at path for a person: its manifest and
// signer first, then whether the signature is by one of the trusted keys
// and every part matches its SHA-256. It returns nil only when all of that
// holds; with no trusted keys, it checks the signature against the key
// the file names and returns an error wrapping ErrNoTrustedKeys.
func Inspect(ctx context.Context, w io.Writer, path string, trusted []signature.PublicKey) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("inspect upgrade file: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("inspect upgrade file: %w", err)
	}
	f, err := Open(fh, st.Size(), WithName(path))
	if err != nil {
		return err
	}
	signer, signerErr := f.Signer()
	if err := describe(w, f.manifest, signer, signerErr); err != nil {
		return fmt.Errorf("inspect upgrade file: %w", err)
	}
	keys := trusted
	if len(keys) == 0 && signerErr == nil {
		keys = []signature.PublicKey{signer}
	}
	v, err := f.Verify(ctx, keys)
	if err != nil {
		_, _ = io.WriteString(w, "NOT VERIFIED\n") // err says why, and matters more
		return err
	}
	var total int64
	for _, p := range f.manifest.Parts {
		total += p.Size
	}
	trust := "trusted key " + v.Signer().ID()
	if len(trusted) == 0 {
		trust = "key " + v.Signer().ID() + ", which is NOT checked against a trusted key"
	}
	_, err = fmt.Fprintf(w, "signature good, by %s; all %d parts (%s) match their sha256\n",
		trust, len(f.manifest.Parts), humanSize(total))
	if err != nil {
		return fmt.Errorf("inspect upgrade file: %w", err)
	}
	if len(trusted) == 0 {
		return fmt.Errorf("%s: signed by key %s (%s): %w", path, signer.ID(), signer, ErrNoTrustedKeys)
	}
	return nil
}

// describe prints the manifest and the key the signature names.
func describe(w io.Writer, m Manifest, signer signature.PublicKey, signerErr error) error {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%s\t%s\n", k, v) }
	row("format", fmt.Sprint(m.FormatVersion))
	row("version", m.Version)
	row("upgrades from", m.MinFromVersion+" or later")
	row("compatible", m.Compatible)
	row("kubernetes", orNone(m.KubernetesVersion))
	row("etcd", orNone(m.EtcdVersion))
	row("built at", m.BuiltAt)
	if signerErr != nil {
		row("signed by", "(the signature names no key)")
	} else {
		row("signed by", fmt.Sprintf("key %s (%s), not yet verified", signer.ID(), signer))
	}
	b.WriteString("parts:\n")
	for _, p := range m.Parts {
		fmt.Fprintf(&b, "  %s\t%s\t%s\t%d bytes\tsha256 %s\n", p.Name, p.Role, humanSize(p.Size), p.Size, p.SHA256)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if _, err := io.WriteString(tw, b.String()); err != nil {
		return err
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// humanSize writes n bytes in binary units with one decimal.
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// LoadTrustedKey returns the public key arg names: the key's text form
// (ed25519:<base64>) or the path of a file holding it on one line (a .pub
// file from `imagebuild config keygen`). Its errors name the file.
func LoadTrustedKey(arg string) (signature.PublicKey, error) {
	if strings.HasPrefix(arg, "ed25519:") {
		return signature.ParsePublicKey(arg)
	}
	data, err := os.ReadFile(arg)
	if err != nil {
		return signature.PublicKey{}, fmt.Errorf("trusted key: %w", err)
	}
	if len(data) > signature.MaxFileSize {
		return signature.PublicKey{}, fmt.Errorf("trusted key %s: %d bytes; a .pub file holds one line", arg, len(data))
	}
	k, err := signature.ParsePublicKey(strings.TrimSuffix(string(data), "\n"))
	if err != nil {
		return signature.PublicKey{}, fmt.Errorf("trusted key %s: %w", arg, err)
	}
	return k, nil
}
