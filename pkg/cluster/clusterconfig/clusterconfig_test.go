package clusterconfig

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/labeldisk"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func topology() Topology {
	return Topology{
		ControlPlanes: []Node{{Hostname: "cp-1", IP: netip.MustParseAddr("10.77.0.10")}, {Hostname: "cp-2", IP: netip.MustParseAddr("10.77.0.11"), MAC: "52:54:00:77:00:11"}},
		Workers:       []Node{{Hostname: "w-1", IP: netip.MustParseAddr("10.77.0.20")}},
		PrefixLength:  24,
		Interface:     "en*",
	}
}

func writeAll(t *testing.T, dir string, secrets string, rotate bool) *Written {
	t.Helper()
	w, err := Write(WriteOptions{Topology: topology(), ClusterName: "lab", SecretsPath: secrets, OutDir: dir, TokenTTL: 24 * time.Hour, RotateToken: rotate, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWriteThenRerunReproduces(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets.yaml")
	w := writeAll(t, filepath.Join(dir, "a"), secrets, false)
	if !w.SecretsCreated || len(w.Nodes) != 3 {
		t.Fatalf("first run: %+v", w)
	}
	if fi, err := os.Stat(secrets); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets file: %v mode %v, want 0600", err, fi.Mode())
	}
	again := writeAll(t, filepath.Join(dir, "b"), secrets, false)
	if again.SecretsCreated {
		t.Fatal("second run generated new secrets instead of reusing the file")
	}
	for _, n := range w.Nodes {
		a, _ := os.ReadFile(n.Config)
		b, _ := os.ReadFile(filepath.Join(dir, "b", n.Hostname+".yaml"))
		if !bytes.Equal(a, b) || len(a) == 0 {
			t.Errorf("%s: config differs between runs with the same secrets", n.Hostname)
		}
		disk, err := readConfig(n.Disk)
		if err != nil || !bytes.Equal(disk, a) {
			t.Errorf("%s: config disk does not hold the config: %v", n.Hostname, err)
		}
		if fi, _ := os.Stat(n.Config); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: config mode %v, want 0600", n.Hostname, fi.Mode())
		}
	}
}

func TestRolesAndSecretsPerNode(t *testing.T) {
	dir := t.TempDir()
	writeAll(t, dir, filepath.Join(dir, "secrets.yaml"), false)
	s, err := clustersecrets.Load(filepath.Join(dir, "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := s.CACertHash()
	want := map[string]string{"cp-1": machineconfig.RoleInit, "cp-2": machineconfig.RoleControlPlane, "w-1": machineconfig.RoleWorker}
	for name, role := range want {
		data, err := os.ReadFile(filepath.Join(dir, name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := machineconfig.Parse(name, data)
		if err != nil {
			t.Fatal(err)
		}
		cl := c.Cluster
		if cl.Role != role || cl.CACertHash != hash || cl.Token != s.Token() || cl.Name != "lab" {
			t.Errorf("%s: role %s hash %s token %s", name, cl.Role, cl.CACertHash, cl.Token)
		}
		if got := strings.Join(cl.ControlPlanes, ","); got != "10.77.0.10,10.77.0.11" {
			t.Errorf("%s: control planes %s", name, got)
		}
		if (cl.PKI != nil) != (role != machineconfig.RoleWorker) {
			t.Errorf("%s (%s): carries CA keys = %v", name, role, cl.PKI != nil)
		}
		if role == machineconfig.RoleWorker && strings.Contains(string(data), "PRIVATE KEY") {
			t.Errorf("worker config carries a private key")
		}
		if c.Registry == nil || c.Registry.Serve != (role != machineconfig.RoleWorker) {
			t.Errorf("%s: registry %+v", name, c.Registry)
		}
	}
	cp2, _ := os.ReadFile(filepath.Join(dir, "cp-2.yaml"))
	if !strings.Contains(string(cp2), "macAddress: 52:54:00:77:00:11") {
		t.Errorf("cp-2's cluster link is not selected by its MAC:\n%s", cp2)
	}
}

func TestRotateToken(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets.yaml")
	first := writeAll(t, filepath.Join(dir, "a"), secrets, false)
	rotated := writeAll(t, filepath.Join(dir, "b"), secrets, true)
	if !rotated.TokenRotated || rotated.CACertHash != first.CACertHash {
		t.Fatalf("rotate: %+v (CA must stay)", rotated)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a", "w-1.yaml"))
	b, _ := os.ReadFile(filepath.Join(dir, "b", "w-1.yaml"))
	if bytes.Equal(a, b) {
		t.Fatal("the worker's config did not change with a new token")
	}
}

func TestTopologyErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Topology)
		want string
	}{
		{"no control plane", func(tp *Topology) { tp.ControlPlanes = nil }, "no control-plane node"},
		{"outside the subnet", func(tp *Topology) { tp.Workers[0].IP = netip.MustParseAddr("10.78.0.20") }, "w-1: 10.78.0.20 is outside the cluster subnet 10.77.0.0/24"},
		{"duplicate IP", func(tp *Topology) { tp.Workers[0].IP = netip.MustParseAddr("10.77.0.10") }, "IP 10.77.0.10 is used twice"},
		{"duplicate name", func(tp *Topology) { tp.Workers[0].Hostname = "cp-1" }, "hostname cp-1 is used twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := topology()
			tt.edit(&tp)
			dir := t.TempDir()
			_, err := Write(WriteOptions{Topology: tp, ClusterName: "lab", SecretsPath: filepath.Join(dir, "s.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "s.yaml")); err == nil {
				t.Error("a rejected topology still wrote the secrets")
			}
		})
	}
}

func TestExpiredTokenRefused(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets.yaml")
	writeAll(t, filepath.Join(dir, "a"), secrets, false)
	_, err := Write(WriteOptions{Topology: topology(), ClusterName: "lab", SecretsPath: secrets, OutDir: filepath.Join(dir, "b"), TokenTTL: time.Hour, Now: now.Add(48 * time.Hour)})
	if err == nil || !strings.Contains(err.Error(), "--rotate-token") {
		t.Fatalf("err = %v, want the expired token and the rotate hint", err)
	}
}

// The topology's ignored preflight checks reach every node's config.
func TestIgnorePreflightErrorsOnEveryNode(t *testing.T) {
	s, err := clustersecrets.Generate("lab", now, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	top := topology()
	top.IgnorePreflightErrors = []string{"NumCPU"}
	cfgs, err := Configs(&top, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfgs {
		if got := strings.Join(c.Cluster.IgnorePreflightErrors, ","); got != "NumCPU" {
			t.Errorf("%s: ignorePreflightErrors %q, want NumCPU", c.Hostname, got)
		}
	}
	top.IgnorePreflightErrors = []string{"all"}
	if _, err := Configs(&top, s); err == nil || !strings.Contains(err.Error(), "ignorePreflightErrors[0]: all would hide") {
		t.Errorf("Configs with all ignored: %v, want the config's error", err)
	}
}

func readConfig(path string) ([]byte, error) {
	f, err := labeldisk.ReadDisk(path)
	if err != nil {
		return nil, err
	}
	return f.Config, nil
}
