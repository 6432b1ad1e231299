package spec

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// extend returns the spec s extends with the top-level sections s sets
// (data is s's file) in place of the base's. The base's relative paths are
// made absolute first, so that the result resolves s's own against s's
// directory and the base's against the base's. The result extends
// nothing: marshalled, it is a spec that stands on its own.
func (s *Spec) extend(data []byte) (*Spec, error) {
	basePath := s.Resolve(s.Extends)
	base, baseData, err := load(basePath)
	if err != nil {
		return nil, fmt.Errorf("extends %q: %w", s.Extends, err)
	}
	if base.Extends != "" {
		var p strictyaml.Problems
		p.Addf(strictyaml.Root().Field("extends"), "names %s, which extends %q itself; extend the spec at the end of that chain", basePath, base.Extends)
		return nil, p.WithLines(data)
	}
	// The base must stand on its own: its problems are reported against
	// its own file and lines, not against the spec that extends it.
	check := *base
	check.setDefaults()
	if err := check.Validate(); err != nil {
		if p, ok := errors.AsType[strictyaml.Problems](err); ok {
			err = p.WithLines(baseData).WithFile(basePath)
		}
		return nil, fmt.Errorf("extends %q: %w", s.Extends, err)
	}
	base.absolutePaths()

	var set map[string]yaml.Node
	if err := yaml.Unmarshal(data, &set); err != nil {
		return nil, err // strictyaml decoded the same bytes already
	}
	// An empty section (a key whose body was left out or commented out)
	// would drop the base's whole section without a word.
	var p strictyaml.Problems
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if set[name].Tag == "!!null" {
			p.Addf(strictyaml.Root().Field(name), "is empty, which would drop the base's whole %s; remove the key to keep the base's, or give it a value", name)
		}
	}
	if err := p.Err(); err != nil {
		return nil, p.WithLines(data)
	}
	merged := *base
	mv, sv := reflect.ValueOf(&merged).Elem(), reflect.ValueOf(s).Elem()
	for i := range mv.NumField() {
		f := mv.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if _, ok := set[name]; ok && f.IsExported() {
			mv.Field(i).Set(sv.Field(i))
		}
	}
	merged.dir = s.dir
	merged.Extends = "" // the result stands on its own
	return &merged, nil
}

// absolutePaths makes every path the spec holds absolute, resolved against
// its file's directory.
func (s *Spec) absolutePaths() {
	s.OS.Overlay = s.Resolve(s.OS.Overlay)
	s.OS.Lock = s.Resolve(s.OS.Lock)
	s.Bundles = resolveAll(s, s.Bundles)
	if s.Components != nil {
		cs := make([]Component, len(s.Components))
		for i, c := range s.Components {
			c.Component = s.Resolve(c.Component)
			cs[i] = c
		}
		s.Components = cs
	}
	s.Upgrade.SigningKey = s.Resolve(s.Upgrade.SigningKey)
	s.SecureBoot.Keys = s.Resolve(s.SecureBoot.Keys)
	if s.SecureBoot.ExtraDB != nil {
		extra := make([]ExtraDBCert, len(s.SecureBoot.ExtraDB))
		for i, c := range s.SecureBoot.ExtraDB {
			c.Cert = s.Resolve(c.Cert)
			extra[i] = c
		}
		s.SecureBoot.ExtraDB = extra
	}
}

func resolveAll(s *Spec, paths []string) []string {
	if paths == nil {
		return nil
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = s.Resolve(p)
	}
	return out
}
