package cloudinit

import (
	"errors"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// knownError reports whether err is one this package documents: a
// sentinel, or the schema's problems.
func knownError(err error) bool {
	var problems strictyaml.Problems
	return errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNoHostname) ||
		errors.As(err, &problems)
}

// FuzzCloudConfig feeds user-data (the seed corpus is in
// testdata/fuzz/FuzzCloudConfig) to MachineConfig: it never panics, fails
// only with its documented errors, and what it returns is a valid machine
// config.
func FuzzCloudConfig(f *testing.F) {
	f.Add([]byte("#cloud-config\nhostname: web\nusers: [default, {name: a, ssh_authorized_keys: [\"" + key1 + "\"]}]\n"))
	f.Add([]byte(machineYAML))
	f.Add([]byte("#cloud-config\nruncmd: [ls]\nusers: x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := MachineConfig(Input{UserData: data, MetaData: MetaData{LocalHostname: "node", PublicKeys: []string{key2}}})
		if err != nil {
			if !knownError(err) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		if _, err := machineconfig.Parse("result", res.Config); err != nil {
			t.Fatalf("MachineConfig returned an invalid config: %v\n%s", err, res.Config)
		}
	})
}

// FuzzNetworkConfig feeds network-config documents (the seed corpus is in
// testdata/fuzz/FuzzNetworkConfig) to NetworkConfig: it never panics and
// fails only with its documented errors; what it maps goes through
// MachineConfig without a panic.
func FuzzNetworkConfig(f *testing.F) {
	f.Add([]byte("version: 1\nconfig:\n  - {type: physical, name: e, subnets: [{type: static, address: 10.0.0.5/24, gateway: 10.0.0.1}]}\n"))
	f.Add([]byte("version: 2\nethernets:\n  e: {match: {macaddress: \"52:54:00:12:34:56\"}, dhcp4: true}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := NetworkConfig(data)
		if err != nil {
			if !knownError(err) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		if _, err := MachineConfig(Input{MetaData: MetaData{LocalHostname: "node"}, Network: n}); err != nil && !knownError(err) {
			t.Fatalf("undocumented error: %v", err)
		}
	})
}
