// Package cmdline finds the machine config on the kernel command line, as
// terrarium.config=<base64 of machine.yaml> (standard or URL-safe
// alphabet, padded or not), for CI and labs without config disks. A
// signature may ride along as terrarium.config.sig=<base64>.
package cmdline

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// Keys read from the command line.
const (
	Key          = "terrarium.config"
	SignatureKey = "terrarium.config.sig"
)

// maxLen bounds one value: the kernel's command line is at most a few KiB
// anyway.
const maxLen = 64 << 10

// Provider reads the command line at Path (/proc/cmdline).
type Provider struct {
	Path string
}

var _ configsource.Provider = Provider{}

// Name implements configsource.Provider.
func (Provider) Name() string { return "kernel-cmdline" }

// Fetch implements configsource.Provider.
func (p Provider) Fetch(ctx context.Context) (*configsource.Found, error) {
	b, err := os.ReadFile(p.Path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.Path, err)
	}
	return Parse(string(b), p.Path)
}

// Parse finds the config in a command line read from path.
func Parse(line, path string) (*configsource.Found, error) {
	var cfg, sig string
	var haveCfg bool
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, Key+"="); ok {
			cfg, haveCfg = v, true
		} else if v, ok := strings.CutPrefix(f, SignatureKey+"="); ok {
			sig = v
		}
	}
	if !haveCfg {
		return nil, fmt.Errorf("no %s= on the kernel command line (%s): %w", Key, path, configsource.ErrAbsent)
	}
	data, err := decode(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %s=: %w (encode machine.yaml with `base64 -w0`)", path, Key, err)
	}
	found := &configsource.Found{Config: data, Source: "kernel command line (" + Key + ")"}
	if sig != "" {
		if found.Signature, err = decode(sig); err != nil {
			return nil, fmt.Errorf("%s: %s=: %w (encode machine.yaml.sig with `base64 -w0`)", path, SignatureKey, err)
		}
	}
	return found, nil
}

func decode(v string) ([]byte, error) {
	if len(v) > maxLen {
		return nil, fmt.Errorf("value is %d bytes, more than the %d allowed", len(v), maxLen)
	}
	v = strings.TrimRight(v, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(v); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("not base64")
}
