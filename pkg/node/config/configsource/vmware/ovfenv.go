package vmware

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
)

// OVFEnvNamespace is the namespace of the OVF environment document
// (DMTF DSP0243), the oe: of its attributes.
const OVFEnvNamespace = "http://schemas.dmtf.org/ovf/environment/1"

// Caps on an OVF environment document, which is outside input.
const (
	maxXMLDepth   = 32
	maxProperties = 1024
)

// ParseOVFEnv returns the properties of an OVF environment document:
// each <Property oe:key="..." oe:value="..."/> of the <PropertySection>s
// directly under <Environment>, which hold this VM's vApp properties (a
// PropertySection of an <Entity> is another VM's). Documents larger than
// MaxValueSize, nested deeper than 32 elements, with more than 1024
// properties, a key twice, a DOCTYPE, or not UTF-8 are refused; errors
// wrap ErrBadOVFEnv or ErrTooLarge. encoding/xml expands no entities
// but XML's five and character references.
func ParseOVFEnv(data []byte) (map[string]string, error) {
	if len(data) > MaxValueSize {
		return nil, fmt.Errorf("OVF environment of %d bytes: %w (%d)", len(data), ErrTooLarge, MaxValueSize)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	var stack []xml.Name
	props := map[string]string{}
	root := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOVFEnv, err)
		}
		switch t := tok.(type) {
		case xml.Directive:
			return nil, fmt.Errorf("%w: a DOCTYPE or other directive is not allowed", ErrBadOVFEnv)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.StartElement:
			if len(stack) == 0 {
				if root {
					return nil, fmt.Errorf("%w: more than one root element", ErrBadOVFEnv)
				}
				if !isEnv(t.Name, "Environment") {
					return nil, fmt.Errorf("%w: the root element is <%s>, not <Environment> of %s", ErrBadOVFEnv, t.Name.Local, OVFEnvNamespace)
				}
				root = true
			}
			stack = append(stack, t.Name)
			if len(stack) > maxXMLDepth {
				return nil, fmt.Errorf("%w: elements nested more than %d deep", ErrBadOVFEnv, maxXMLDepth)
			}
			if len(stack) == 3 && isEnv(stack[1], "PropertySection") && isEnv(t.Name, "Property") {
				if err := addProperty(props, t.Attr); err != nil {
					return nil, err
				}
			}
		}
	}
	if !root {
		return nil, fmt.Errorf("%w: no <Environment> element", ErrBadOVFEnv)
	}
	return props, nil
}

func addProperty(props map[string]string, attrs []xml.Attr) error {
	var key, value string
	var hasKey bool
	for _, a := range attrs {
		if a.Name.Space != OVFEnvNamespace && a.Name.Space != "" {
			continue
		}
		switch a.Name.Local {
		case "key":
			key, hasKey = a.Value, true
		case "value":
			value = a.Value
		}
	}
	switch _, dup := props[key]; {
	case !hasKey || key == "":
		return fmt.Errorf("%w: a <Property> has no oe:key", ErrBadOVFEnv)
	case dup:
		return fmt.Errorf("%w: property %q is set twice", ErrBadOVFEnv, key)
	case len(props) >= maxProperties:
		return fmt.Errorf("%w: more than %d properties", ErrBadOVFEnv, maxProperties)
	}
	props[key] = value
	return nil
}

// isEnv reports whether name is local in the OVF environment namespace,
// or in none (a document that forgot its xmlns).
func isEnv(name xml.Name, local string) bool {
	return name.Local == local && (name.Space == OVFEnvNamespace || name.Space == "")
}
