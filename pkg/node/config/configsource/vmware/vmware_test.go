package vmware

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// fakeRPC stands in for vmware-rpctool. It is a fake because the real
// tool talks to the hypervisor through the VMware backdoor, which exists
// only inside a VMware VM, not here. It answers "info-get guestinfo.<key>"
// as the tool does: the value and a newline, or exit status 1 and "No
// value found".
type fakeRPC struct {
	values map[string]string
	// err, when set, is every call's answer.
	err error

	mu    sync.Mutex
	calls []string
}

func (f *fakeRPC) Output(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	if f.err != nil {
		return nil, f.err
	}
	if len(args) != 1 {
		return nil, &CommandError{Name: name, Code: 1, Stderr: "rpctool syntax:\n"}
	}
	key, ok := strings.CutPrefix(args[0], "info-get guestinfo.")
	v, set := f.values[key]
	if !ok || !set {
		return nil, &CommandError{Name: name, Code: 1, Stderr: "No value found\n"}
	}
	return []byte(v + "\n"), nil
}

const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop"

// ovfEnv writes an OVF environment as vSphere does, with the properties.
func ovfEnv(props ...string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<Environment
     xmlns="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:ve="http://www.vmware.com/schema/ovfenv"
     oe:id=""
     ve:vCenterId="vm-1234">
   <PlatformSection>
      <Kind>VMware ESXi</Kind>
      <Version>8.0.2</Version>
      <Vendor>VMware, Inc.</Vendor>
      <Locale>en</Locale>
   </PlatformSection>
   <PropertySection>
`)
	for i := 0; i+1 < len(props); i += 2 {
		b.WriteString(`         <Property oe:key="` + xmlEscape(props[i]) + `" oe:value="` + xmlEscape(props[i+1]) + `"/>` + "\n")
	}
	b.WriteString(`   </PropertySection>
   <ve:EthernetAdapterSection>
      <ve:Adapter ve:mac="00:50:56:aa:bb:cc" ve:network="VM Network" ve:unitNumber="7"/>
   </ve:EthernetAdapterSection>
</Environment>
`)
	return b.String()
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", `"`, "&quot;", "\n", "&#10;").Replace(s)
}

func TestFetchGuestinfo(t *testing.T) {
	const source = "VMware guestinfo (guestinfo.terrarium.config)"
	tests := []struct {
		name    string
		values  map[string]string
		want    *configsource.Found
		wantErr error
		says    string
	}{
		{
			name:   "base64",
			values: map[string]string{ConfigKey: b64(config), EncodingKey: "base64"},
			want:   &configsource.Found{Config: []byte(config), Source: source},
		},
		{
			name:   "gzip+base64 and a signature",
			values: map[string]string{ConfigKey: gzb64(t, []byte(config)), EncodingKey: "gzip+base64", SignatureKey: b64("sig")},
			want:   &configsource.Found{Config: []byte(config), Signature: []byte("sig"), Source: source},
		},
		{
			name:   "gz+b64",
			values: map[string]string{ConfigKey: gzb64(t, []byte(config)), EncodingKey: "gz+b64"},
			want:   &configsource.Found{Config: []byte(config), Source: source},
		},
		{
			name:   "plain, no encoding",
			values: map[string]string{ConfigKey: config},
			want:   &configsource.Found{Config: []byte(config), Source: source},
		},
		{
			name:   "encoding null is plain, signature null is none",
			values: map[string]string{ConfigKey: config, EncodingKey: "null", SignatureKey: "null"},
			want:   &configsource.Found{Config: []byte(config), Source: source},
		},
		{
			name:    "config null",
			values:  map[string]string{ConfigKey: "null", EncodingKey: "base64"},
			wantErr: configsource.ErrAbsent,
			says:    "no guestinfo.terrarium.config or guestinfo.ovfEnv",
		},
		{
			name:    "config empty",
			values:  map[string]string{ConfigKey: ""},
			wantErr: configsource.ErrAbsent,
		},
		{
			name:    "nothing set",
			wantErr: configsource.ErrAbsent,
			says:    "no guestinfo.terrarium.config or guestinfo.ovfEnv",
		},
		{
			name:    "bad base64",
			values:  map[string]string{ConfigKey: "%%%", EncodingKey: "base64"},
			wantErr: ErrBadBase64,
			says:    "guestinfo.terrarium.config",
		},
		{
			name:    "bad gzip",
			values:  map[string]string{ConfigKey: b64(config), EncodingKey: "gzip+base64"},
			wantErr: ErrBadGzip,
		},
		{
			name:    "unknown encoding",
			values:  map[string]string{ConfigKey: config, EncodingKey: "yaml"},
			wantErr: ErrUnknownEncoding,
		},
		{
			name:    "bad signature",
			values:  map[string]string{ConfigKey: b64(config), EncodingKey: "base64", SignatureKey: "%%%"},
			wantErr: ErrBadBase64,
			says:    "guestinfo.terrarium.config.sig",
		},
		{
			name:    "signature too large",
			values:  map[string]string{ConfigKey: b64(config), EncodingKey: "base64", SignatureKey: b64(strings.Repeat("s", MaxSignatureSize+1))},
			wantErr: ErrTooLarge,
		},
		{
			name:    "value too large",
			values:  map[string]string{ConfigKey: strings.Repeat("#", MaxValueSize+1)},
			wantErr: ErrTooLarge,
		},
		{
			name: "guestinfo.terrarium.config wins over the OVF environment",
			values: map[string]string{ConfigKey: b64(config), EncodingKey: "base64",
				OVFEnvKey: ovfEnv(PropHostname, "other")},
			want: &configsource.Found{Config: []byte(config), Source: source},
		},
		{
			name:   "OVF environment, terrarium.config",
			values: map[string]string{OVFEnvKey: ovfEnv(PropConfig, b64(config), PropSignature, b64("sig"))},
			want: &configsource.Found{Config: []byte(config), Signature: []byte("sig"),
				Source: "VMware OVF environment (guestinfo.ovfEnv, terrarium.config)"},
		},
		{
			name:   "OVF environment, hand-typed",
			values: map[string]string{OVFEnvKey: ovfEnv(PropHostname, "node-7", PropSSHKey, sshKey)},
			want: &configsource.Found{
				Config: []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-7\nnetwork:\n  interfaces:\n" +
					"    - name: en*\n      dhcp: true\nadmin:\n  name: admin\n  sshAuthorizedKeys:\n    - " + sshKey + "\n"),
				Source: "VMware OVF environment (guestinfo.ovfEnv, terrarium.hostname, terrarium.ssh-key)",
			},
		},
		{
			name:    "OVF environment without terrarium properties",
			values:  map[string]string{OVFEnvKey: ovfEnv("other.app.url", "https://example.com")},
			wantErr: configsource.ErrAbsent,
			says:    "no guestinfo.terrarium.config; guestinfo.ovfEnv sets none of terrarium.config",
		},
		{
			name:    "OVF environment, not XML",
			values:  map[string]string{OVFEnvKey: "{}"},
			wantErr: ErrBadOVFEnv,
			says:    "guestinfo.ovfEnv",
		},
		{
			name:    "OVF environment, invalid hand-typed config",
			values:  map[string]string{OVFEnvKey: ovfEnv(PropHostname, "Node_7")},
			wantErr: ErrBadProperties,
			says:    "terrarium.hostname → hostname",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rpc := &fakeRPC{values: tt.values}
			p := Provider{Runner: rpc, MediaDir: filepath.Join(t.TempDir(), "by-label")}
			got, err := p.Fetch(context.Background())
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.says)
				assert.Nil(t, got)
				if !errors.Is(tt.wantErr, configsource.ErrAbsent) {
					assert.NotErrorIs(t, err, configsource.ErrAbsent, "a value that is there but unreadable is not absence")
				} else {
					assert.Contains(t, err.Error(), p.MediaDir, "says where else it looked")
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			for _, c := range rpc.calls {
				assert.True(t, strings.HasPrefix(c, "vmware-rpctool info-get guestinfo."), c)
			}
		})
	}
}

// TestFetchNoGuestinfo: without vmware-rpctool, or off VMware, guestinfo
// is absent with the reason, and the ISO transport is still looked at.
func TestFetchNoGuestinfo(t *testing.T) {
	tests := []struct {
		name string
		err  error
		says string
	}{
		{
			name: "not installed",
			err:  &exec.Error{Name: "vmware-rpctool", Err: exec.ErrNotFound},
			says: "vmware-rpctool is not installed (package open-vm-tools)",
		},
		{
			name: "not on VMware",
			err: &CommandError{Name: "vmware-rpctool", Code: 255,
				Stderr: "Error: vmware-rpctool must be run inside a virtual machine on a VMware hypervisor product.\n"},
			says: "not on VMware (vmware-rpctool: exit status 255: Error: vmware-rpctool must be run inside a virtual machine",
		},
		{
			name: "backdoor without RPC (QEMU's vmport)",
			err:  &CommandError{Name: "vmware-rpctool", Code: 1, Stderr: "Failed sending message to VMware.\n"},
			says: "Failed sending message to VMware.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			rpc := &fakeRPC{err: tt.err}
			_, err := Provider{Runner: rpc, MediaDir: dir}.Fetch(context.Background())
			require.ErrorIs(t, err, configsource.ErrAbsent)
			assert.Contains(t, err.Error(), tt.says)
			assert.Contains(t, err.Error(), "no CD labelled OVF ENV (or OVFENV, OVF-TRANSPORT) under "+dir)
			assert.Len(t, rpc.calls, 1, "one failed call is enough to know")

			// The ISO transport needs no guestinfo.
			writeLabel(t, dir, `OVF\x20ENV`)
			media := fakeMedia{filepath.Join(dir, `OVF\x20ENV`): {OVFEnvFile: ovfEnv(PropHostname, "node-1")}}
			found, err := Provider{Runner: rpc, MediaDir: dir, ReadMedia: media.read}.Fetch(context.Background())
			require.NoError(t, err)
			assert.Contains(t, string(found.Config), "hostname: node-1")
		})
	}
}

// TestFetchLaterCallFails: once guestinfo answered, a failure is an error,
// not absence.
func TestFetchLaterCallFails(t *testing.T) {
	rpc := &failAfter{fakeRPC: fakeRPC{values: map[string]string{ConfigKey: b64(config)}}, n: 1}
	_, err := Provider{Runner: rpc, MediaDir: t.TempDir()}.Fetch(context.Background())
	require.Error(t, err)
	assert.NotErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), "Failed sending message to VMware.")
}

// failAfter answers n calls as its fakeRPC does, then fails.
type failAfter struct {
	fakeRPC
	n int
}

func (f *failAfter) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	if f.n == 0 {
		return nil, &CommandError{Name: name, Code: 1, Stderr: "Failed sending message to VMware.\n"}
	}
	f.n--
	return f.fakeRPC.Output(ctx, name, args...)
}

func TestFetchCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rpc := &fakeRPC{err: &CommandError{Name: "vmware-rpctool", Code: -1}}
	_, err := Provider{Runner: rpc, MediaDir: t.TempDir()}.Fetch(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, configsource.ErrAbsent)
}

func TestDefaults(t *testing.T) {
	p := Provider{}
	assert.Equal(t, "vmware", p.Name())
	assert.Equal(t, "vmware-rpctool", p.tool())
	assert.Equal(t, ExecRunner{}, p.runner())
	assert.Equal(t, "/dev/disk/by-label", p.mediaDir())
	assert.NotNil(t, p.readMedia())
}

// TestExecRunner runs a stand-in vmware-rpctool (a shell script: the real
// one needs the VMware backdoor) through the real ExecRunner.
func TestExecRunner(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "vmware-rpctool")
	script := `#!/bin/sh
case "$1" in
"info-get guestinfo.terrarium.config") echo '` + b64(config) + `' ;;
"info-get guestinfo.terrarium.config.encoding") echo base64 ;;
"info-get guestinfo.huge") head -c 3000000 /dev/zero | tr '\0' a ;;
"info-get guestinfo.offvmware") echo "Error: $0 must be run inside a virtual machine on a VMware hypervisor product." >&2; exit 255 ;;
*) echo "No value found" >&2; exit 1 ;;
esac
`
	require.NoError(t, os.WriteFile(tool, []byte(script), 0o755))
	ctx := context.Background()
	p := Provider{Tool: tool, MediaDir: dir}

	found, err := p.Fetch(ctx)
	require.NoError(t, err)
	assert.Equal(t, config, string(found.Config))
	assert.Nil(t, found.Signature)

	_, err = ExecRunner{}.Output(ctx, tool, "info-get guestinfo.offvmware")
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 255, ce.Code)
	assert.Contains(t, ce.Stderr, "must be run inside a virtual machine")

	_, _, err = p.guestinfo(ctx, "huge")
	require.ErrorIs(t, err, ErrTooLarge, "output is capped")

	_, err = Provider{Tool: filepath.Join(dir, "missing"), MediaDir: dir}.Fetch(ctx)
	require.ErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), "is not installed (package open-vm-tools)")
}

// TestNotVMwareByDMI: off VMware (by the firmware's vendor) guestinfo is
// not asked at all: a running node looks every few seconds.
func TestNotVMwareByDMI(t *testing.T) {
	vendor := filepath.Join(t.TempDir(), "sys_vendor")
	require.NoError(t, os.WriteFile(vendor, []byte("QEMU\n"), 0o644))
	runner := &countingRunner{}
	p := Provider{Runner: runner, DMIVendorFile: vendor, MediaDir: t.TempDir()}
	_, err := p.Fetch(context.Background())
	require.ErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), `not a VMware VM`)
	assert.Contains(t, err.Error(), `"QEMU"`)
	assert.Zero(t, runner.calls, "vmware-rpctool not run")

	require.NoError(t, os.WriteFile(vendor, []byte("VMware, Inc.\n"), 0o644))
	_, _ = p.Fetch(context.Background())
	assert.NotZero(t, runner.calls, "on VMware, guestinfo is asked")
}

// countingRunner counts its calls and answers like vmware-rpctool for an
// unset key. (A fake: the VMware backdoor cannot run here.)
type countingRunner struct{ calls int }

func (r *countingRunner) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	r.calls++
	return nil, &CommandError{Name: name, Code: 1, Stderr: "No value found"}
}
