package cisbench

import (
	"strings"
	"testing"
)

// FuzzParseFlags: a process's command line (any bytes of /proc/PID/cmdline)
// never panics, and every flag it yields was on it.
func FuzzParseFlags(f *testing.F) {
	f.Add([]byte("kube-apiserver\x00--profiling=false\x00--etcd-servers\x00https://127.0.0.1:2379\x00--v\x00"))
	f.Add([]byte("\x00\x00-\x00--\x00--=x\x00"))
	f.Fuzz(func(t *testing.T, cmdline []byte) {
		args := splitCmdline(cmdline)
		for name := range parseFlags(args) {
			if name == "" || !strings.Contains(string(cmdline), name) {
				t.Fatalf("flag %q is not on the command line %q", name, cmdline)
			}
		}
	})
}

// FuzzKubeletSettings: a kubelet configuration file (any YAML) never
// panics when its settings are read.
func FuzzKubeletSettings(f *testing.F) {
	f.Add([]byte(kubeletYAML))
	f.Add([]byte("authentication: 3\nfeatureGates: [a]\ntlsCipherSuites: {a: b}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := parseKubeletConfig(b)
		if err != nil {
			return
		}
		k := &kubeletSettings{flags: map[string]string{}, config: cfg}
		for _, path := range [][]string{anonymousPath, clientCAPath, {"tlsCipherSuites"}, {"featureGates", "RotateKubeletServerCertificate"}} {
			k.setting("", path, "default")
		}
	})
}
