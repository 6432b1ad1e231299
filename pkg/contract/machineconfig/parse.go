package machineconfig

import (
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// Parse decodes, defaults and validates the machine config in data, which
// was read from filename (used only in error messages).
//
// The error, if any, lists every problem found, one per line, as
//
//	<filename>: <path>: <what is wrong and how to fix it> (line N)
//
// and unwraps to a strictyaml.Problems. A document whose apiVersion or kind
// is present but not the expected one is reported as such and not checked
// further, since its other fields follow some other schema.
func Parse(filename string, data []byte) (*Config, error) {
	header := headerProblems(data)
	if header.wrong {
		return nil, header.problems.WithLines(data).WithFile(filename)
	}
	var cfg Config
	if err := strictyaml.Unmarshal(data, &cfg); err != nil {
		var problems strictyaml.Problems
		if !errors.As(err, &problems) {
			return nil, fmt.Errorf("%s: %w", filename, err)
		}
		if !documentLevel(problems) {
			problems = append(header.problems, problems...)
		}
		return nil, problems.WithLines(data).WithFile(filename)
	}
	setDefaults(&cfg)
	if problems := cfg.validate(); len(problems) > 0 {
		return nil, problems.WithLines(data).WithFile(filename)
	}
	return &cfg, nil
}

// documentLevel reports whether any problem concerns the document as a
// whole (it is empty, not YAML, not a mapping...), which makes checking its
// apiVersion and kind moot.
func documentLevel(problems strictyaml.Problems) bool {
	for _, p := range problems {
		if p.Path == strictyaml.Root().String() {
			return true
		}
	}
	return false
}

// setDefaults fills in the values a config may leave out, and turns empty
// lists into nil ones (an empty list means the same as none), so that
// equivalent files parse to equal Configs.
func setDefaults(c *Config) {
	if len(c.Network.Interfaces) == 0 {
		c.Network.Interfaces = nil
	}
	for i := range c.Network.Interfaces {
		iface := &c.Network.Interfaces[i]
		if len(iface.Addresses) == 0 {
			iface.Addresses = nil
		}
		if len(iface.DNS) == 0 {
			iface.DNS = nil
		}
	}
	if len(c.TrustedKeys) == 0 {
		c.TrustedKeys = nil
	}
	if c.Admin != nil && c.Admin.Name == "" {
		c.Admin.Name = DefaultAdminName
	}
	if c.Cluster != nil {
		c.Cluster.setDefaults()
	}
}

// header is the outcome of checking apiVersion and kind before the rest.
type header struct {
	problems strictyaml.Problems
	// wrong is set when apiVersion or kind is present with another value.
	wrong bool
}

// headerProblems checks apiVersion and kind with a lenient decode, so that
// they can be judged even when the rest of the document has problems. When
// even the lenient decode fails, it reports nothing and leaves the problems
// to the strict decode.
func headerProblems(data []byte) header {
	var h struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if err := yaml.Unmarshal(data, &h); err != nil {
		return header{}
	}
	var ps strictyaml.Problems
	validateHeader(&ps, h.APIVersion, h.Kind)
	wrong := (h.APIVersion != "" && h.APIVersion != APIVersion) || (h.Kind != "" && h.Kind != Kind)
	return header{problems: ps, wrong: wrong}
}

func validateHeader(ps *strictyaml.Problems, apiVersion, kind string) {
	root := strictyaml.Root()
	switch apiVersion {
	case APIVersion:
	case "":
		ps.Addf(root.Field("apiVersion"), "required; set it to %q", APIVersion)
	default:
		ps.Addf(root.Field("apiVersion"), "%q is not supported; set it to %q", apiVersion, APIVersion)
	}
	switch kind {
	case Kind:
	case "":
		ps.Addf(root.Field("kind"), "required; set it to %q", Kind)
	default:
		ps.Addf(root.Field("kind"), "%q is not supported; set it to %q", kind, Kind)
	}
}
