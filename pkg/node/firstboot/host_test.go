package firstboot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

func TestHostPath(t *testing.T) {
	for _, tc := range []struct{ root, p, want string }{
		{"/", "/etc/hostname", "/etc/hostname"},
		{"/tmp/root", "/etc/hostname", "/tmp/root/etc/hostname"},
		{"/tmp/root/", "/etc/../etc/hostname", "/tmp/root/etc/hostname"},
		{"/tmp/root", "relative", "/tmp/root/relative"},
	} {
		if got := (&Host{Root: tc.root}).Path(tc.p); got != tc.want {
			t.Errorf("Host{%q}.Path(%q) = %q, want %q", tc.root, tc.p, got, tc.want)
		}
	}
}

func TestHostRunError(t *testing.T) {
	h := &Host{Exec: func(ctx context.Context, name string, args ...string) ([]byte, error) {
		return []byte("  useradd: user 'ops' already exists\n"), errFake
	}}
	err := h.run(context.Background(), "useradd", "--create-home", "ops")
	if !errors.Is(err, errFake) {
		t.Errorf("error %v does not wrap the Exec error", err)
	}
	if want := "useradd --create-home ops: fake error: useradd: user 'ops' already exists"; err == nil || err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestRealHostRun(t *testing.T) {
	h := RealHost()
	if err := h.run(context.Background(), "true"); err != nil {
		t.Fatalf("no true(1): %v", err)
	}
	if err := h.run(context.Background(), "false"); err == nil {
		t.Error("false(1) succeeded")
	}
}

func TestWriteIfChanged(t *testing.T) {
	h := &Host{Root: t.TempDir()}
	wrote, err := h.writeIfChanged("/a/b/file", []byte("one\n"), 0o640)
	if err != nil || !wrote {
		t.Fatalf("first write = %v, %v", wrote, err)
	}
	if m := mode(t, h.Path("/a/b/file")); m != 0o640 {
		t.Errorf("mode = %o, want 640", m)
	}
	wrote, err = h.writeIfChanged("/a/b/file", []byte("one\n"), 0o640)
	if err != nil || wrote {
		t.Errorf("unchanged write = %v, %v; want no write", wrote, err)
	}
	// A changed file is replaced with the new mode, whatever its old one.
	if err := os.Chmod(h.Path("/a/b/file"), 0o666); err != nil {
		t.Fatal(err)
	}
	wrote, err = h.writeIfChanged("/a/b/file", []byte("two\n"), 0o600)
	if err != nil || !wrote {
		t.Fatalf("changed write = %v, %v", wrote, err)
	}
	if b, _ := os.ReadFile(h.Path("/a/b/file")); string(b) != "two\n" {
		t.Errorf("content = %q", b)
	}
	if m := mode(t, h.Path("/a/b/file")); m != 0o600 {
		t.Errorf("mode = %o, want 600", m)
	}
	if _, err := os.Stat(h.Path("/a/b/file.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	// A file where a directory should be.
	if _, err := h.writeIfChanged("/a/b/file/x", []byte("x"), 0o644); err == nil {
		t.Error("write below a file succeeded")
	}
}

func TestLookupUser(t *testing.T) {
	h := &Host{Root: t.TempDir()}
	if _, err := lookupUser(h, "ops"); err == nil || errors.Is(err, errNoUser) {
		t.Errorf("lookupUser without /etc/passwd = %v, want a read error", err)
	}
	passwd := strings.Join([]string{
		"root:x:0:0:root:/root:/bin/bash",
		"# a comment",
		"short:x:1",
		"ops:x:1000:1001:Terrarium admin:/home/ops:/bin/bash",
		"bad:x:12a:1:x:/home/bad:/bin/sh",
		"",
	}, "\n")
	if err := os.MkdirAll(h.Path("/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.Path("/etc/passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := lookupUser(h, "ops")
	if err != nil || u.uid != 1000 || u.gid != 1001 || u.home != "/home/ops" {
		t.Errorf("lookupUser(ops) = %+v, %v", u, err)
	}
	if _, err := lookupUser(h, "nobody"); !errors.Is(err, errNoUser) {
		t.Errorf("lookupUser(nobody) = %v, want errNoUser", err)
	}
	if _, err := lookupUser(h, "short"); !errors.Is(err, errNoUser) {
		t.Errorf("lookupUser(short) = %v, want errNoUser", err)
	}
	if _, err := lookupUser(h, "bad"); err == nil || errors.Is(err, errNoUser) || !strings.Contains(err.Error(), "bad ids") {
		t.Errorf("lookupUser(bad) = %v", err)
	}
	// A prefix of a name is not the name.
	if _, err := lookupUser(h, "op"); !errors.Is(err, errNoUser) {
		t.Errorf("lookupUser(op) = %v", err)
	}
}

func TestNetworkFiles(t *testing.T) {
	cfg := &machineconfig.Config{Network: machineconfig.Network{Interfaces: []machineconfig.Interface{
		{Name: "en*", DHCP: true, Addresses: []string{"10.0.0.5/24"}, DNS: []string{"9.9.9.9"}},
		{Name: "eth1", Addresses: []string{"192.168.1.2/24"}},
	}}}
	files := networkFiles(cfg)
	if len(files) != 2 {
		t.Fatalf("files = %v", files)
	}
	want0 := "# Written by Terrarium firstboot from the machine config.\n[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n" +
		"Address=10.0.0.5/24\nDNS=9.9.9.9\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n\n[DHCPv4]\nUseHostname=no\nUseNTP=no\nUseDomains=no\n"
	if got := files[filepath.Join(networkDir, "10-terrarium-0.network")]; got != want0 {
		t.Errorf("file 0:\n%s\nwant:\n%s", got, want0)
	}
	got1 := files[filepath.Join(networkDir, "10-terrarium-1.network")]
	if strings.Contains(got1, "DHCP") || strings.Contains(got1, "Gateway=") || !strings.Contains(got1, "Name=eth1\n") {
		t.Errorf("file 1:\n%s", got1)
	}
	if len(networkFiles(&machineconfig.Config{})) != 0 {
		t.Error("files for a config without interfaces")
	}
	if strings.Contains(files[filepath.Join(networkDir, "10-terrarium-0.network")]+got1, "[Route]") {
		t.Error("a route to a Service network on a node without a cluster")
	}
}

// On a cluster node the cluster link routes the Service network, so that
// the node itself reaches ClusterIPs without a default route; no other
// link does.
func TestNetworkFilesRouteServicesOnTheClusterLink(t *testing.T) {
	cfg := &machineconfig.Config{
		Network: machineconfig.Network{Interfaces: []machineconfig.Interface{
			{MACAddress: "52:54:00:00:00:10", DHCP: true},
			{MACAddress: "52:54:00:77:00:10", Addresses: []string{"10.77.0.10/24"}},
		}},
		Cluster: &machineconfig.Cluster{NodeIP: "10.77.0.10", ServiceCIDR: "10.96.0.0/12"},
	}
	files := networkFiles(cfg)
	mgmt, link := files[filepath.Join(networkDir, "10-terrarium-0.network")], files[filepath.Join(networkDir, "10-terrarium-1.network")]
	if want := "\n[Route]\nDestination=10.96.0.0/12\nPreferredSource=10.77.0.10\n"; !strings.Contains(link, want) {
		t.Errorf("cluster link:\n%s\nwant it to contain:%s", link, want)
	}
	if strings.Contains(mgmt, "[Route]") {
		t.Errorf("the other link routes too:\n%s", mgmt)
	}
}

func TestApplyAdminChownsKeys(t *testing.T) {
	// The .ssh directory and authorized_keys belong to the admin user.
	e := newEnv(t)
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/home/ops/.ssh", "/home/ops/.ssh/authorized_keys"} {
		fi, err := os.Stat(e.path(p))
		if err != nil {
			t.Fatal(err)
		}
		if uid, gid, ok := fileOwner(fi); ok && (uid != os.Getuid() || gid != os.Getgid()) {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, uid, gid, os.Getuid(), os.Getgid())
		}
	}
}
