package configsign

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/transpile"
)

// DiskOption sets an optional input of WriteDisk.
type DiskOption func(*diskOptions) error

type diskOptions struct {
	// ignition is the file of the config's Ignition part, "" for none.
	ignition string
}

// WithIgnition puts the config in the file at path — Ignition JSON, a
// Butane config (variant fcos or flatcar) or a Container Linux Config —
// into the machine config's ignition field, as Ignition 3 JSON (see
// AddIgnition).
func WithIgnition(path string) DiskOption {
	return func(o *diskOptions) error {
		if path == "" {
			return errors.New("ignition file: empty path")
		}
		o.ignition = path
		return nil
	}
}

func makeDiskOptions(opts []DiskOption) (*diskOptions, error) {
	o := &diskOptions{}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// AddIgnition translates the file at ignPath to Ignition 3 JSON (package
// transpile: Ignition passes through, Butane and Container Linux Configs
// are translated, a Butane config's local files are read from the file's
// directory), checks it as the node will, and returns the machine config
// cfg (read from path) with it as its ignition field: its canonical YAML,
// which is what a disk carries, and that parsed. A cfg that has an
// ignition field already is refused: one config, one Ignition part.
// Errors name the file, and the line and column in it.
func AddIgnition(path string, cfg *machineconfig.Config, ignPath string) ([]byte, *machineconfig.Config, error) {
	if cfg.Ignition != "" {
		return nil, nil, fmt.Errorf("%s: $.ignition: already set, and %s would be a second Ignition config; "+
			"remove ignition: from the machine config, or leave out the Ignition file", path, ignPath)
	}
	src, err := os.ReadFile(ignPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read the Ignition config: %w", err)
	}
	res, err := transpile.Translate(ignPath, src, transpile.WithFilesDir(filepath.Dir(ignPath)))
	if err != nil {
		return nil, nil, err
	}
	if err := res.Place(res.Config.CheckMachineConfig(cfg)); err != nil {
		return nil, nil, err
	}
	with := *cfg
	with.Ignition = string(res.Ignition)
	data, err := with.Marshal()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	out, err := machineconfig.Parse(path, data)
	if err != nil {
		return nil, nil, fmt.Errorf("the machine config with %s: %w", ignPath, err)
	}
	return data, out, nil
}

// CheckIgnition checks a machine config's own ignition field (Ignition
// JSON) as the node will before it applies anything: what Terrarium does
// not apply is refused by name, at its line and column in the machine
// config (data, read from path; in the field alone when it is not a block
// scalar).
func CheckIgnition(path string, data []byte, cfg *machineconfig.Config) error {
	if cfg.Ignition == "" {
		return nil
	}
	name := path + ": ignition"
	res, err := transpile.Translate(name, []byte(cfg.Ignition))
	if err == nil {
		err = res.Place(res.Config.CheckMachineConfig(cfg))
	}
	var ps transpile.Problems
	if !errors.As(err, &ps) {
		return err
	}
	line, col, ok := blockStart(data, "ignition")
	if !ok {
		return err
	}
	for i := range ps {
		ps[i].File = path
		if ps[i].Line > 0 {
			ps[i].Line += line
			if ps[i].Column > 0 {
				ps[i].Column += col
			}
		}
	}
	return ps
}

// blockStart finds the block scalar of a top-level key in a YAML
// document: the line before its text's first line, and the text's
// indentation, so that a place in the text (line 1 col 1 is its start)
// plus these is the place in the document.
func blockStart(data []byte, key string) (line, col int, ok bool) {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return 0, 0, false
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		v := m.Content[i+1]
		if m.Content[i].Value != key || v.Kind != yaml.ScalarNode || v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
			continue
		}
		// The text starts on the line after the indicator (| or >), at
		// the indentation of its first line.
		lines := strings.Split(string(data), "\n")
		if v.Line >= len(lines) {
			return 0, 0, false
		}
		first := lines[v.Line]
		return v.Line, len(first) - len(strings.TrimLeft(first, " ")), v.Style&yaml.LiteralStyle != 0
	}
	return 0, 0, false
}
