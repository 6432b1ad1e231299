package transpile

import (
	"encoding/json"
	"fmt"
	"strings"

	cjson "github.com/clarketm/json"
	v23 "github.com/coreos/ign-converter/translate/v23tov30"
	old "github.com/coreos/ignition/config/v2_3/types"
	ct "github.com/flatcar/container-linux-config-transpiler/config"
	cttypes "github.com/flatcar/container-linux-config-transpiler/config/types"
	ctreport "github.com/flatcar/ignition/config/validate/report"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// translateCLC transpiles a Container Linux Config to Ignition 2.3 with
// ct's own parser and converter, then converts that to Ignition 3.0 with
// ign-converter. The Ignition 3 paths match the source's in snake_case
// (storage.files[0] is the CLC's storage.files[0]).
func translateCLC(name string, data []byte, src source) ([]byte, locator, error) {
	var (
		rpt ctreport.Report
		ps  Problems
		out []byte
	)
	err := safely(func() error {
		cfg, ast, prpt := ct.Parse(data)
		rpt = prpt
		if prpt.IsFatal() {
			return nil
		}
		// The sections of Container Linux that Terrarium does not have
		// are refused before ct makes units and files of them.
		ps = clcSections(name, cfg, src)
		if len(ps) > 0 {
			return nil
		}
		ign2, crpt := ct.Convert(cfg, "", ast)
		rpt.Merge(crpt)
		if crpt.IsFatal() {
			return nil
		}
		var err error
		if out, err = convert2to3(ign2); err != nil {
			ps = Problems{{File: name, Path: "$", Message: "ign-converter: " + err.Error(), Err: ErrInvalid}}
		}
		return nil
	})
	if err != nil {
		return nil, nil, Problems{{File: name, Path: "$", Message: err.Error(), Err: ErrInvalid}}
	}
	ps = append(clcProblems(name, rpt), ps...)
	if len(ps) > 0 {
		return nil, nil, ps
	}
	return out, src.find, nil
}

// clcSections refuses the sections of a Container Linux Config that
// configure what Container Linux has and Terrarium does not.
func clcSections(name string, cfg cttypes.Config, src source) Problems {
	var ps Problems
	refuse := func(key, why string) {
		at := src.find([]any{key})
		ps = append(ps, Problem{File: name, Line: at.line, Column: at.col, Path: "$." + key, Message: why, Err: ignitionspec.ErrUnsupported})
	}
	if cfg.Etcd != nil {
		refuse("etcd", "Terrarium runs etcd itself, as a static pod of the control plane (the machine config's cluster:); remove etcd:")
	}
	if cfg.Flannel != nil {
		refuse("flannel", "Terrarium's pod network is the cluster's CNI from the image's bundle; remove flannel:")
	}
	if cfg.Docker != nil {
		refuse("docker", "Terrarium runs containerd for Kubernetes and has no Docker daemon; remove docker:")
	}
	if cfg.Update != nil {
		refuse("update", "Terrarium is upgraded by swapping its image (signed upgrade files), not by update_engine; remove update:")
	}
	if cfg.Locksmith != nil {
		refuse("locksmith", "Terrarium's upgrades reboot one node at a time under a Lease in the cluster, not through locksmith; remove locksmith:")
	}
	if len(cfg.Networkd.Units) > 0 {
		refuse("networkd", "Ignition 3 has no networkd section; set the node's network in the machine config's network:, "+
			"or write the units as storage.files under /etc/systemd/network")
	}
	return ps
}

// isCTDefault says a warning of ct only states what it does by default,
// which is what Terrarium does too (files 0644, directories 0755).
func isCTDefault(msg string) bool {
	return msg == cttypes.WarningUnsetFileMode.Error() || msg == cttypes.WarningUnsetDirMode.Error()
}

// clcProblems turns ct's report into Problems: its errors, deprecations
// and warnings (an unrecognized key) but those that state its defaults.
func clcProblems(name string, rpt ctreport.Report) Problems {
	var ps Problems
	for _, e := range rpt.Entries {
		switch {
		case e.Kind == ctreport.EntryInfo, e.Kind == ctreport.EntryWarning && isCTDefault(e.Message):
			continue
		}
		if e.Line == 0 && strings.HasPrefix(e.Message, "yaml: ") {
			ps = append(ps, yamlTextProblems(name, e.Message)...)
			continue
		}
		msg := e.Message
		switch e.Kind {
		case ctreport.EntryWarning:
			msg = "warning: " + msg
			if strings.HasPrefix(e.Message, "Config has unrecognized key") {
				msg += "; it is not in the Container Linux Config spec: fix its spelling, or remove it"
			}
		case ctreport.EntryDeprecated:
			msg = "deprecated: " + msg + "; ign-converter converts no deprecated field: use its replacement"
		}
		ps = append(ps, Problem{File: name, Line: e.Line, Column: e.Column, Path: "$", Message: msg, Err: ErrInvalid})
	}
	return ps
}

// convert2to3 converts ct's Ignition 2.3 config to Ignition 3.0 JSON with
// ign-converter. ct and ign-converter use two forks of Ignition 0.x's
// types; JSON carries the config from one to the other. A file system
// other than root is given a mount point of its name, so that the
// conversion goes through and Terrarium's check refuses it by name.
func convert2to3(in any) ([]byte, error) {
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode the Ignition 2.3 config: %w", err)
	}
	var cfg old.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decode the Ignition 2.3 config: %w", err)
	}
	fsMap := map[string]string{}
	for _, fs := range cfg.Storage.Filesystems {
		if fs.Name != "root" {
			fsMap[fs.Name] = "/" + fs.Name
		}
	}
	v3, err := v23.Translate(cfg, fsMap)
	if err != nil {
		return nil, err
	}
	out, err := cjson.MarshalIndent(v3, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the Ignition 3.0 config: %w", err)
	}
	return out, nil
}
