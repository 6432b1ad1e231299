package machineconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"gopkg.in/yaml.v3"
)

// Marshal returns the canonical YAML form of c: fields in declaration
// order, two-space indentation, no comments, and optional fields left out
// when empty. Parse accepts it and gives back an equal Config (for a valid,
// defaulted c).
func (c *Config) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("machineconfig: encoding %s: %w", Kind, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("machineconfig: encoding %s: %w", Kind, err)
	}
	return buf.Bytes(), nil
}

// Digest returns "sha256:<hex>" of c's canonical form (see Marshal). Two
// files that Parse to the same Config have the same digest, whatever their
// comments, key order or formatting, so it tells whether the config on disk
// changed in substance since it was applied.
func (c *Config) Digest() string {
	data, err := c.Marshal()
	if err != nil {
		// Config holds only strings, bools, slices and pointers to them,
		// which yaml.v3 always encodes.
		panic(fmt.Sprintf("machineconfig: Digest: %v", err))
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
