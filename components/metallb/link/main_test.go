package main

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// fakeLinks is a node's links, as hostLinks would list them.
func fakeLinks(ls ...link) func() ([]link, error) {
	return func() ([]link, error) { return ls, nil }
}

func l(name string, prefixes ...string) link {
	out := link{name: name}
	for _, p := range prefixes {
		out.addrs = append(out.addrs, netip.MustParsePrefix(p))
	}
	return out
}

// node is a test node: loopback, a management NIC, the cluster's link,
// flannel's and a pod's veth.
var node = fakeLinks(
	l("lo", "127.0.0.1/8", "::1/128"),
	l("enp0s3", "10.0.2.15/24"),
	l("enp0s4", "10.77.0.10/24", "fe80::5054:ff:fe77:10/64"),
	l("flannel.1", "10.244.0.0/32"),
	l("veth1234"),
)

// exclude reads a written excludel2.yaml as the speaker does (sigs.k8s.io/yaml,
// the patterns joined into one expression).
func exclude(t *testing.T, path string) *regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var conf struct {
		AnnouncedInterfacesToExclude []string `json:"announcedInterfacesToExclude"`
	}
	require.NoError(t, yaml.Unmarshal(b, &conf))
	require.Len(t, conf.AnnouncedInterfacesToExclude, 1)
	return regexp.MustCompile("(" + conf.AnnouncedInterfacesToExclude[0] + ")")
}

func TestWritesTheClusterLinkOnly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "excludel2.yaml")
	var out bytes.Buffer
	require.NoError(t, run([]string{"-node-ip", "10.77.0.10", "-o", file}, &out, node))
	assert.Contains(t, out.String(), "answers on enp0s4")
	re := exclude(t, file)
	for name, excluded := range map[string]bool{
		"enp0s4": false, "enp0s3": true, "enp0s40": true, "enp0s": true, "lo": true,
		"flannel.1": true, "veth1234": true, "eth0": true, "Enp0s4": true, "enp0s4\n": true,
	} {
		assert.Equal(t, excluded, re.MatchString(name), "link %q excluded", name)
	}
	st, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		args  []string
		links func() ([]link, error)
		want  string
	}{
		{"no address yet", []string{"-node-ip", "10.77.0.99", "-o", filepath.Join(dir, "a")}, node, "no link holds the node's address 10.77.0.99 yet"},
		{"two links", []string{"-node-ip", "10.0.0.1", "-o", filepath.Join(dir, "b")},
			fakeLinks(l("eth0", "10.0.0.1/24"), l("eth1", "10.0.0.1/24")), "on more than one link (eth0, eth1)"},
		{"not an address", []string{"-node-ip", "cp-1", "-o", filepath.Join(dir, "c")}, node, "-node-ip"},
		{"no file", []string{"-node-ip", "10.77.0.10"}, node, "-o: no file named"},
		{"extra", []string{"-node-ip", "10.77.0.10", "-o", filepath.Join(dir, "d"), "more"}, node, "unexpected arguments"},
		{"name too long", []string{"-node-ip", "10.0.0.1", "-o", filepath.Join(dir, "f")},
			fakeLinks(l("a-very-long-link-name", "10.0.0.1/24")), "not a link name this program can express"},
		{"links fail", []string{"-node-ip", "10.77.0.10", "-o", filepath.Join(dir, "e")},
			func() ([]link, error) { return nil, errors.New("list links: denied") }, "list links: denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, &bytes.Buffer{}, tc.links)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refusal writes nothing")
}

func TestIPv6NodeAddress(t *testing.T) {
	file := filepath.Join(t.TempDir(), "excludel2.yaml")
	links := fakeLinks(l("ens192", "fd00:77::10/64"), l("ens224", "192.168.1.5/24"))
	require.NoError(t, run([]string{"-node-ip", "fd00:77::10", "-o", file}, &bytes.Buffer{}, links))
	re := exclude(t, file)
	assert.False(t, re.MatchString("ens192"))
	assert.True(t, re.MatchString("ens224"))
}

// FuzzAllBut: the expression matches every name but the one it leaves
// out, whatever runes either holds.
func FuzzAllBut(f *testing.F) {
	f.Add("enp0s4", "enp0s3")
	f.Add("eth0", "eth0")
	f.Add("br-lan.10", "br-lan")
	f.Add("a*b", "aab")
	f.Add("é]x", "é")
	f.Fuzz(func(t *testing.T, name, other string) {
		if !utf8.ValidString(name) || !utf8.ValidString(other) || len(name) > maxLinkName {
			t.Skip("run refuses a link name that is not UTF-8 or longer than Linux allows")
		}
		re, err := regexp.Compile("(" + allBut(name) + ")")
		if err != nil {
			t.Fatalf("allBut(%q) = %q: %v", name, allBut(name), err)
		}
		if re.MatchString(name) {
			t.Fatalf("allBut(%q) matches %q itself", name, name)
		}
		if other != name && !re.MatchString(other) {
			t.Fatalf("allBut(%q) misses %q", name, other)
		}
	})
}
