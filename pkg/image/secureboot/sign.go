package secureboot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/authenticode"
)

// lookTool finds a tool of the build host's, naming the setup that
// installs it when it is missing.
func lookTool(name, pkg string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s (Debian package %s) is not installed: run `make deps`: %w", name, pkg, err)
	}
	return p, nil
}

// run runs a tool and returns an error with its output when it fails.
func run(ctx context.Context, name, pkg string, args ...string) error {
	p, err := lookTool(name, pkg)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// SignPE signs the unsigned PE binary in (systemd-boot, a UKI) with k,
// normally the db key, into out (which must be another file): an
// Authenticode signature written in Go (pkg/contract/authenticode: no
// signing time, so the same key and image give the same bytes), then
// checked by VerifyPE with sbverify, an implementation other than ours.
func SignPE(ctx context.Context, k *Key, in, out string) error {
	if in == out {
		return fmt.Errorf("sign %s: the output must be another file", in)
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return fmt.Errorf("sign %s: %w", in, err)
	}
	signed, err := authenticode.Sign(b, k.Private, k.Cert)
	if err != nil {
		return fmt.Errorf("sign %s with the %s key: %w", in, k.Role, err)
	}
	if err := os.WriteFile(out, signed, 0o644); err != nil {
		return fmt.Errorf("sign %s: %w", in, err)
	}
	if err := VerifyPE(ctx, k.CertFile, out); err != nil {
		_ = os.Remove(out)
		return fmt.Errorf("sign %s with the %s key: %w", in, k.Role, err)
	}
	return nil
}

// VerifyPE checks that the PE binary at path carries a valid signature
// chaining to the PEM certificate certFile (sbverify --cert).
func VerifyPE(ctx context.Context, certFile, path string) error {
	if err := run(ctx, "sbverify", "sbsigntool", "--cert", certFile, path); err != nil {
		return fmt.Errorf("verify the signature of %s against %s: %w", path, certFile, err)
	}
	return nil
}
