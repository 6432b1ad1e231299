// Package transpile turns the configs a Fedora CoreOS or Flatcar site
// already has into the Ignition 3 JSON that Terrarium applies: Ignition
// JSON passes through; a Butane config (variant fcos or flatcar, every
// stable version Butane v0.23.0 knows) is translated with Butane's own
// translator; a Container Linux Config (Flatcar's `ct` YAML) is transpiled
// with container-linux-config-transpiler to Ignition 2.3 and converted to
// 3.0 with ign-converter. The kind is told from the content (Detect).
//
// Every result is then checked by Terrarium's Ignition path itself
// (pkg/contract/ignitionspec's Parse, the check a node runs before it
// applies anything), so what Terrarium cannot apply — disks, RAID, file
// systems, LUKS, kernel arguments, remote sources, passwords — is refused
// by name here too, before a config disk is written. Each problem, the
// translators' own and Terrarium's, names the file, the line and column in
// it and what to do ("config.bu:12:3: $.storage.disks: Terrarium does not
// partition disks; use the build spec").
package transpile

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// Kind is the kind of config a file holds.
type Kind int

const (
	// KindUnknown is none of the kinds below.
	KindUnknown Kind = iota
	// KindIgnition is Ignition JSON: a JSON object.
	KindIgnition
	// KindButane is a Butane config: YAML with variant: and version:.
	KindButane
	// KindCLC is a Container Linux Config: YAML with the sections of
	// Flatcar's `ct` (passwd, storage, systemd, networkd, ...).
	KindCLC
)

// String names the kind, for messages.
func (k Kind) String() string {
	switch k {
	case KindIgnition:
		return "Ignition config"
	case KindButane:
		return "Butane config"
	case KindCLC:
		return "Container Linux Config"
	}
	return "unknown"
}

// isCLCSection says a key is a top-level section of a Container Linux
// Config.
func isCLCSection(key string) bool {
	switch key {
	case "ignition", "storage", "systemd", "networkd", "passwd", "etcd", "flannel", "update", "docker", "locksmith":
		return true
	}
	return false
}

// butaneKeyLine finds a Butane config's variant: or version: key at the
// start of a line, for a file that is not YAML enough to parse (so that
// Butane's translator, not Detect, says what is wrong with it).
var butaneKeyLine = regexp.MustCompile(`(?m)^(variant|version)\s*:`)

// Detect tells the kind of config in data from its content: a JSON object
// is Ignition; YAML with a top-level variant: or version: is Butane
// (Ignition names its version under ignition:, a Container Linux Config
// not at all); other YAML with a section of a Container Linux Config is
// one, unless it has a machine config's apiVersion or kind.
func Detect(data []byte) Kind {
	data = trimBOM(data)
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return KindUnknown
	}
	if trimmed[0] == '{' {
		return KindIgnition
	}
	keys, err := topKeys(data)
	if err != nil {
		if butaneKeyLine.Match(data) {
			return KindButane
		}
		return KindUnknown
	}
	// A machine config (apiVersion, kind) is none of them, though its
	// ignition: is a section of a Container Linux Config.
	_, api := keys["apiVersion"]
	_, kind := keys["kind"]
	if api || kind {
		return KindUnknown
	}
	_, variant := keys["variant"]
	version, hasVersion := keys["version"]
	// A Container Linux Config may say version: 0 (its only version);
	// Butane's versions are semver.
	if variant || hasVersion && version != "0" {
		return KindButane
	}
	for k := range keys {
		if isCLCSection(k) {
			return KindCLC
		}
	}
	return KindUnknown
}

// topKeys returns the keys of the top-level mapping of a YAML document,
// each with its value when that is a scalar (none when the document is
// not a mapping).
func topKeys(data []byte) (map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	keys := map[string]string{}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return keys, nil
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		keys[m.Content[i].Value] = m.Content[i+1].Value
	}
	return keys, nil
}

// trimBOM drops a UTF-8 byte order mark, which editors on Windows write.
func trimBOM(data []byte) []byte {
	return bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
}

// Result is a config translated and checked.
type Result struct {
	// Kind is what the file held.
	Kind Kind
	// Ignition is the Ignition 3 JSON: the file itself for Ignition, the
	// translator's output (indented) otherwise.
	Ignition []byte
	// Config is what Terrarium's Ignition path makes of it.
	Config *ignitionspec.Config

	// name and loc place the problems of a later check in the source.
	name string
	loc  locator
}

// Place places the problems of a later check of r.Config (such as
// CheckMachineConfig, or the node's check against a host, whose errors are
// ignitionspec.Problems at the Ignition config's paths) in the source
// file, as Translate does its own; any other error becomes one Problem of
// the whole config, of that error. A nil error stays nil.
func (r *Result) Place(err error) error {
	if err == nil {
		return nil
	}
	return place(r.name, err, r.loc)
}

// Translate tells the kind of config data holds (Detect), translates it
// to Ignition 3 JSON and checks that with Terrarium's Ignition path. name
// is the file's name, for messages.
//
// Its error is Problems, one for each thing wrong, each at its file, line
// and column where the file shows them: the translator's report (wrapping
// ErrInvalid), what Terrarium does not take (ignitionspec.ErrUnsupported,
// ignitionspec.ErrVersion) or ignitionspec.ErrMalformed; a file of no
// known kind is ErrUnknownFormat.
func Translate(name string, data []byte, opts ...Option) (*Result, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("translate %s: %w", name, err)
	}
	data = trimBOM(data)
	src := parseSource(data)
	kind := Detect(data)
	var (
		out []byte
		loc locator
	)
	switch kind {
	case KindIgnition:
		out, loc = data, src.find
	case KindButane:
		out, loc, err = translateButane(name, data, src, o)
	case KindCLC:
		out, loc, err = translateCLC(name, data, src)
	default:
		err = unknownFormat(name, data)
	}
	if err != nil {
		return nil, clampLines(err, data)
	}
	c, err := ignitionspec.Parse(out)
	if err != nil {
		return nil, place(name, err, loc)
	}
	return &Result{Kind: kind, Ignition: out, Config: c, name: name, loc: loc}, nil
}

// unknownFormat says why data is none of the kinds.
func unknownFormat(name string, data []byte) error {
	p := Problem{File: name, Path: "$", Err: ErrUnknownFormat}
	keys, err := topKeys(data)
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		p.Message = "the file is empty; give an Ignition config (JSON), a Butane config (variant: fcos or flatcar) or a Container Linux Config"
	case err != nil:
		yp := yamlProblems(name, err)[0]
		p.Line = yp.Line
		p.Message = fmt.Sprintf("not JSON, and not YAML either (%s); give an Ignition config (JSON), a Butane config or a Container Linux Config", yp.Message)
	case keys["apiVersion"] != "" && keys["kind"] != "":
		p.Message = "this is a machine config (apiVersion, kind), not an Ignition, Butane or Container Linux Config; " +
			"pass it as MACHINE.yaml, and the Ignition part as its own file"
	default:
		p.Message = "not an Ignition config (a JSON object), a Butane config (variant: and version:) " +
			"or a Container Linux Config (passwd:, storage:, systemd:, networkd: ...): none of its top-level keys is one of theirs"
	}
	return Problems{p}
}

// place places the problems Terrarium's Ignition path found in the
// translated config in the source file.
func place(name string, err error, loc locator) error {
	var ips ignitionspec.Problems
	if !errors.As(err, &ips) {
		// One error for the whole config: its spec version, or not JSON
		// (which only the file itself can be; its message says where).
		kind := err
		for _, k := range []error{ignitionspec.ErrVersion, ignitionspec.ErrMalformed, ignitionspec.ErrUnsupported, ignitionspec.ErrConflict} {
			if errors.Is(err, k) {
				kind = k
				break
			}
		}
		return Problems{{File: name, Path: "$", Message: err.Error(), Err: kind}}
	}
	ps := make(Problems, 0, len(ips))
	for _, ip := range ips {
		at := loc(parsePath(ip.Path))
		ps = append(ps, Problem{File: name, Line: at.line, Column: at.col, Path: ip.Path, Message: ip.Message, Err: ip.Err})
	}
	return ps
}

// clampLines keeps the problems' lines within data: YAML places an error
// at the end of the stream on the line after the last.
func clampLines(err error, data []byte) error {
	var ps Problems
	if !errors.As(err, &ps) {
		return err
	}
	last := lineCount(data)
	for i := range ps {
		if ps[i].Line > last {
			ps[i].Line, ps[i].Column = last, 0
		}
	}
	return ps
}

// lineCount counts lines as YAML does: a line ends at \n, \r\n or \r.
func lineCount(data []byte) int {
	n := 1
	for i := 0; i < len(data); i++ {
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			continue
		}
		if data[i] == '\n' || data[i] == '\r' {
			n++
		}
	}
	return n
}
