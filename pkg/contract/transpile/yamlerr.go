package transpile

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// yamlLine is how yaml.v3 says where an error is.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlProblems turns a YAML decoding error into Problems at their lines:
// a syntax error, or each of a type error's mismatches.
func yamlProblems(name string, err error) Problems {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return yamlTextProblems(name, strings.Join(te.Errors, "\n"))
	}
	return yamlTextProblems(name, err.Error())
}

// yamlTextProblems is yamlProblems of an error's text, as ct's report
// keeps it: "yaml: unmarshal errors:" and a line for each mismatch.
func yamlTextProblems(name, text string) Problems {
	msgs := strings.Split(strings.TrimPrefix(text, "yaml: unmarshal errors:\n"), "\n")
	ps := make(Problems, 0, len(msgs))
	for _, msg := range msgs {
		if strings.TrimSpace(msg) == "" {
			continue
		}
		p := Problem{File: name, Path: "$", Message: msg, Err: ErrInvalid}
		if m := yamlLine.FindStringSubmatch(strings.TrimSpace(msg)); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			p.Message = m[2]
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		ps = append(ps, Problem{File: name, Path: "$", Message: strings.TrimSpace(text), Err: ErrInvalid})
	}
	return ps
}
