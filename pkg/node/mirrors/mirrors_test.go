package mirrors

import (
	"strings"
	"testing"
)

func TestFilesNeverNameUpstream(t *testing.T) {
	files := Files([]Peer{{Addr: "10.0.0.11:5443", CAFile: "/etc/terrarium/pki/registry-ca.pem"}})
	if len(files) != len(Upstreams()) {
		t.Fatalf("got %d files, want one per upstream (%d)", len(files), len(Upstreams()))
	}
	for path, content := range files {
		host := strings.TrimSuffix(path, "/hosts.toml")
		for _, line := range strings.Split(content, "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			if host != "_default" && strings.Contains(line, host) {
				t.Errorf("%s names its upstream host outside comments: %q", path, line)
			}
		}
		loop := strings.Index(content, `[host."http://127.0.0.1:5000"]`)
		peer := strings.Index(content, `[host."https://10.0.0.11:5443"]`)
		if loop < 0 || peer < 0 || loop > peer {
			t.Errorf("%s: want loopback first, then the peer:\n%s", path, content)
		}
		if !strings.Contains(content, `server = "http://127.0.0.1:5000"`) {
			t.Errorf("%s: the fallback server must be loopback:\n%s", path, content)
		}
		if !strings.Contains(content, `ca = "/etc/terrarium/pki/registry-ca.pem"`) {
			t.Errorf("%s: the peer must be verified with the cluster CA", path)
		}
	}
}
