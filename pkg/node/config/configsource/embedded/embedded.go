// Package embedded finds a machine config baked into the image by its
// build spec, at a fixed path in the slot (read-only, like the slot).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// maxSize bounds the file read.
const maxSize = 1 << 20

// Provider reads the config file at Path and its signature at Path+".sig".
type Provider struct {
	Path string
}

var _ configsource.Provider = Provider{}

// Name implements configsource.Provider.
func (Provider) Name() string { return "image" }

// Fetch implements configsource.Provider.
func (p Provider) Fetch(ctx context.Context) (*configsource.Found, error) {
	data, err := readCapped(p.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the image carries no %s: %w", p.Path, configsource.ErrAbsent)
	}
	if err != nil {
		return nil, err
	}
	sig, err := readCapped(p.Path + ".sig")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return &configsource.Found{Config: data, Signature: sig, Source: "image (" + p.Path + ")"}, nil
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxSize {
		return nil, fmt.Errorf("%s is more than the %d bytes allowed", path, maxSize)
	}
	return b, nil
}
