// Package strictyaml decodes YAML into Go structs strictly: unknown fields,
// type mismatches, duplicate keys, empty list items (which yaml.v3 would
// drop), empty input and multi-document input are all errors, and every
// problem is reported (not just the first) tagged with its JSONPath-like
// location in the document, such as
//
//	$.network.interfaces[0].adress: unknown field; did you mean "address"? (line 7)
//
// Decoding happens in two passes: the input is parsed into a yaml.Node tree
// which is checked against the target's reflect.Type (using the same `yaml`
// struct tags as gopkg.in/yaml.v3), and only a tree without problems is then
// decoded into the target by yaml.v3 itself.
//
// Problems is also the error type for validation done after decoding: callers
// add their own findings with Addf and tag the result with the file name via
// WithFile.
package strictyaml
