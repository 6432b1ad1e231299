package secureboot

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
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

// SignPE signs the PE binary in (systemd-boot, a UKI) with k, normally the
// db key, into out (which must be another file): an Authenticode
// signature by sbsign, then checked by VerifyPE.
func SignPE(ctx context.Context, k *Key, in, out string) error {
	if in == out {
		return fmt.Errorf("sign %s: the output must be another file", in)
	}
	if err := run(ctx, "sbsign", "sbsigntool", "--key", k.KeyFile, "--cert", k.CertFile, "--output", out, in); err != nil {
		return fmt.Errorf("sign %s with the %s key: %w", in, k.Role, err)
	}
	if err := VerifyPE(ctx, k.CertFile, out); err != nil {
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
