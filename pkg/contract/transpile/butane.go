package transpile

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/coreos/butane/config/common"
	fcos1_0 "github.com/coreos/butane/config/fcos/v1_0"
	fcos1_1 "github.com/coreos/butane/config/fcos/v1_1"
	fcos1_2 "github.com/coreos/butane/config/fcos/v1_2"
	fcos1_3 "github.com/coreos/butane/config/fcos/v1_3"
	fcos1_4 "github.com/coreos/butane/config/fcos/v1_4"
	fcos1_5 "github.com/coreos/butane/config/fcos/v1_5"
	fcos1_6 "github.com/coreos/butane/config/fcos/v1_6"
	flatcar1_0 "github.com/coreos/butane/config/flatcar/v1_0"
	flatcar1_1 "github.com/coreos/butane/config/flatcar/v1_1"
	cutil "github.com/coreos/butane/config/util"
	"github.com/coreos/butane/translate"
	"github.com/coreos/go-semver/semver"
	"github.com/coreos/vcontext/path"
	"github.com/coreos/vcontext/report"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// butaneSpec is one Butane spec version: a new, empty config of it and
// the name of its method that translates it ("ToIgn3_5"; the method
// ToIgn3_5Unvalidated also returns the translations of its paths).
type butaneSpec struct {
	config func() any
	method string
}

// butaneSpecFor is the spec of a variant and version Terrarium takes:
// every stable fcos and flatcar version Butane v0.23.0 has. Experimental
// versions make an experimental Ignition spec (3.6.0-experimental), which
// Terrarium's Ignition path does not take.
func butaneSpecFor(variant, version string) (butaneSpec, bool) {
	switch variant + "+" + version {
	case "fcos+1.0.0":
		return butaneSpec{func() any { return &fcos1_0.Config{} }, "ToIgn3_0"}, true
	case "fcos+1.1.0":
		return butaneSpec{func() any { return &fcos1_1.Config{} }, "ToIgn3_1"}, true
	case "fcos+1.2.0":
		return butaneSpec{func() any { return &fcos1_2.Config{} }, "ToIgn3_2"}, true
	case "fcos+1.3.0":
		return butaneSpec{func() any { return &fcos1_3.Config{} }, "ToIgn3_2"}, true
	case "fcos+1.4.0":
		return butaneSpec{func() any { return &fcos1_4.Config{} }, "ToIgn3_3"}, true
	case "fcos+1.5.0":
		return butaneSpec{func() any { return &fcos1_5.Config{} }, "ToIgn3_4"}, true
	case "fcos+1.6.0":
		return butaneSpec{func() any { return &fcos1_6.Config{} }, "ToIgn3_5"}, true
	case "flatcar+1.0.0":
		return butaneSpec{func() any { return &flatcar1_0.Config{} }, "ToIgn3_3"}, true
	case "flatcar+1.1.0":
		return butaneSpec{func() any { return &flatcar1_1.Config{} }, "ToIgn3_4"}, true
	}
	return butaneSpec{}, false
}

// butaneVersions names the versions butaneSpecFor takes, for errors.
func butaneVersions(variant string) (stable, newest string) {
	if variant == "flatcar" {
		return "1.0.0 and 1.1.0", "1.1.0"
	}
	return "1.0.0 to 1.6.0", "1.6.0"
}

// translateButane translates a Butane config with Butane's translator,
// its report turned into Problems.
func translateButane(name string, data []byte, src source, o *options) ([]byte, locator, error) {
	spec, err := butaneHeader(name, data, src)
	if err != nil {
		return nil, nil, err
	}
	cfg := spec.config()
	topts := common.TranslateOptions{FilesDir: o.filesDir}
	var (
		out []byte
		rpt report.Report
	)
	err = safely(func() error {
		var err error
		out, rpt, err = cutil.TranslateBytes(data, cfg, spec.method, common.TranslateBytesOptions{TranslateOptions: topts, Pretty: true})
		return err
	})
	if ps := butaneProblems(name, rpt); len(ps) > 0 {
		return nil, nil, ps
	}
	if err != nil {
		return nil, nil, yamlProblems(name, err)
	}
	var ts translate.TranslationSet
	if err := safely(func() error {
		ret := reflect.ValueOf(cfg).Elem().MethodByName(spec.method + "Unvalidated").Call([]reflect.Value{reflect.ValueOf(topts)})
		ts, _ = ret[1].Interface().(translate.TranslationSet)
		return nil
	}); err != nil {
		return nil, nil, Problems{{File: name, Path: "$", Message: err.Error(), Err: ErrInvalid}}
	}
	return out, butaneLocator(src, ts), nil
}

// butaneHeader reads the variant and version and refuses those
// Terrarium does not take, at their lines.
func butaneHeader(name string, data []byte, src source) (butaneSpec, error) {
	keys, err := topKeys(data)
	if err != nil {
		return butaneSpec{}, yamlProblems(name, err)
	}
	variant, version := keys["variant"], keys["version"]
	at := func(key string) position { return src.find([]any{key}) }
	problem := func(key string, kind error, format string, args ...any) Problems {
		p := at(key)
		return Problems{{File: name, Line: p.line, Column: p.col, Path: "$." + key, Message: fmt.Sprintf(format, args...), Err: kind}}
	}
	switch variant {
	case "fcos", "flatcar":
	case "":
		return butaneSpec{}, problem("variant", ErrInvalid, "missing; a Butane config names its variant: fcos or flatcar")
	default:
		return butaneSpec{}, problem("variant", ignitionspec.ErrUnsupported,
			"%q is not taken: Terrarium takes Butane's fcos and flatcar variants (openshift, r4e and fiot configs are for those systems); write it as variant: fcos", variant)
	}
	stable, newest := butaneVersions(variant)
	v, err := semver.NewVersion(version)
	if err != nil {
		return butaneSpec{}, problem("version", ErrInvalid, "%q is not a version (as in %s); %s versions %s are taken", version, newest, variant, stable)
	}
	spec, ok := butaneSpecFor(variant, v.String())
	switch {
	case ok:
		return spec, nil
	case v.PreRelease != "":
		return butaneSpec{}, problem("version", ignitionspec.ErrVersion,
			"%s %s makes an experimental Ignition spec, which Terrarium does not take (it may still change); write version: %s", variant, v, newest)
	}
	return butaneSpec{}, problem("version", ignitionspec.ErrVersion, "Butane v0.23.0 has no %s version %s; %s versions %s are taken", variant, v, variant, stable)
}

// butaneProblems turns the errors and warnings of Butane's report into
// Problems: each warning is something that would not be applied as
// written (an unknown key, a decimal mode), as with Ignition's warnings.
func butaneProblems(name string, rpt report.Report) Problems {
	var ps Problems
	for _, e := range rpt.Entries {
		if e.Kind != report.Error && e.Kind != report.Warn {
			continue
		}
		p := Problem{File: name, Path: formatPath(e.Context.Path), Message: e.Message + butaneHint(e.Message), Err: ErrInvalid}
		if e.Kind == report.Warn {
			p.Message = "warning: " + p.Message
		}
		if e.Marker.StartP != nil {
			p.Line, p.Column = int(e.Marker.StartP.Line), int(e.Marker.StartP.Column)
		}
		ps = append(ps, p)
	}
	return ps
}

// butaneHint says what to do about a report's message, where Butane's
// own words do not.
func butaneHint(msg string) string {
	switch {
	case strings.HasPrefix(msg, "unused key"):
		return "; it is not in this Butane spec: fix its spelling, or remove it"
	case msg == common.ErrNoFilesDir.Error():
		return " (Terrarium reads them from the directory of the Butane file)"
	}
	return ""
}

// butaneLocator finds an Ignition path's source through Butane's
// translations: the path's own, else the first in the file of those
// under it, else the same path in snake_case.
func butaneLocator(src source, ts translate.TranslationSet) locator {
	return func(elems []any) position {
		want := path.New("json", elems...).String()
		if t, ok := ts.Set[want]; ok {
			if p, n := src.walk(t.From.Path); n > 0 {
				return p
			}
		}
		var first position
		for k, t := range ts.Set {
			if !strings.HasPrefix(k, want+".") {
				continue
			}
			if p, n := src.walk(t.From.Path); n > 0 && (first.line == 0 || p.before(first)) {
				first = p
			}
		}
		if first.line > 0 {
			return first
		}
		return src.find(elems)
	}
}

// safely runs a translator, turning its panic into an error: a file
// someone else wrote must not bring imagebuild (or a node) down.
func safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the translator failed on this file (%v); please report it with the file", r)
		}
	}()
	return f()
}
