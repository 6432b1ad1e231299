package apilb

import (
	"encoding/json"
	"fmt"
	"os"
)

// Where firstboot configures the node's balancer, and the unit that runs it.
const (
	ConfigFile = "/etc/terrarium/apilb.json"
	Unit       = "terrarium-apilb.service"
)

// File is the balancer's configuration file.
type File struct {
	Listen   string   `json:"listen"`
	Backends []string `json:"backends"`
}

// MarshalFile renders f as the configuration file's content.
func MarshalFile(f File) ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// LoadFile reads a configuration file into a Config.
func LoadFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read balancer config: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return Config{}, fmt.Errorf("balancer config %s: %w", path, err)
	}
	return Config{Listen: f.Listen, Backends: f.Backends}, nil
}
