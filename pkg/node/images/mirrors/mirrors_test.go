package mirrors

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every upstream resolves to loopback alone: no upstream host, no peer
// (the node's registry asks the peers), and loopback as the fallback.
func TestFilesNameOnlyLoopback(t *testing.T) {
	files := Files()
	require.Len(t, files, len(Upstreams()), "one per upstream")
	for path, content := range files {
		host := strings.TrimSuffix(path, "/hosts.toml")
		var hosts []string
		for _, line := range strings.Split(content, "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			if host != "_default" {
				assert.NotContains(t, line, host, "%s names its upstream host outside comments", path)
			}
			if strings.HasPrefix(line, "[host.") {
				hosts = append(hosts, line)
			}
		}
		assert.Equal(t, []string{`[host."http://127.0.0.1:5000"]`}, hosts, path)
		assert.Contains(t, content, `server = "http://127.0.0.1:5000"`, "%s: the fallback server must be loopback", path)
		assert.NotContains(t, content, "https://", path)
	}
}
