package registry

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// go-containerregistry's remote package pulls and validates every image.
func TestRemotePull(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	host := strings.TrimPrefix(srv.URL, "http://")
	must(t, pullIndex(t, host+"/"+pauseRef))
	must(t, pullIndex(t, host+"/pause:3.10"))
	must(t, pullImage(t, host+"/"+pauseRepo+"@"+digestOf(t, f.pauseARM64).String()))
	must(t, pullImage(t, host+"/"+helloRef))
	must(t, pullImage(t, host+"/library/hello:1.0"))
	must(t, pullImage(t, host+"/"+toolsRef))
}

func TestSkopeoCopy(t *testing.T) {
	skopeo := needTool(t, "skopeo")
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name, src string
		all       bool
		want      v1.Hash
	}{
		{"index", host + "/pause:3.10", true, digestOf(t, f.pause)},
		{"image", host + "/" + toolsRef, false, digestOf(t, f.tools)},
		{"child by digest", host + "/" + pauseRepo + "@" + digestOf(t, f.pauseARM64).String(), false, digestOf(t, f.pauseARM64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "oci")
			args := []string{"--insecure-policy", "copy", "--src-tls-verify=false"}
			if tc.all {
				args = append(args, "--all")
			}
			args = append(args, "docker://"+tc.src, "oci:"+dst+":copied")
			out, err := exec.Command(skopeo, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			raw, err := os.ReadFile(filepath.Join(dst, "index.json"))
			must(t, err)
			var idx v1.IndexManifest
			must(t, json.Unmarshal(raw, &idx))
			if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != tc.want {
				t.Fatalf("copied %+v, want digest %s", idx.Manifests, tc.want)
			}
		})
	}
}
