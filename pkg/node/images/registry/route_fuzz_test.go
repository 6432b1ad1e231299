package registry

import (
	"net/url"
	"strings"
	"testing"
)

// routeSeps are the separators of the /v2/ paths that carry a reference,
// by the route they make.
var routeSeps = map[routeKind]string{routeManifest: "/manifests/", routeBlob: "/blobs/", routeReferrers: "/referrers/"}

// FuzzParseRoute feeds request paths to parseRoute, and repository names,
// references and ns values to the checks ServeHTTP makes of them. A route
// it finds is the path again: the path is "/v2/" + name + the route's
// separator + ref, ref one non-empty path element; a path built from a
// name and reference is found as that route again (unless the name holds
// "/blobs/uploads", which is the upload route, refused as read-only); and
// a name validName accepts is plain path elements, the same path again
// once put into a peer's request URL.
func FuzzParseRoute(f *testing.F) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []struct{ path, name, ref, ns string }{
		{"/v2/", "registry.k8s.io/pause", "3.10", ""},
		{"/v2", "pause", "3.10", "registry.k8s.io"},
		{"/v2/_catalog", "library/hello", digest, "docker.io"},
		{"/v2/registry.k8s.io/pause/tags/list", "localhost:5000/app", "latest", ""},
		{"/v2/registry.k8s.io/pause/manifests/3.10", "a/manifests/b", "c", ""},
		{"/v2/pause/blobs/" + digest, "a/blobs/b", digest, "[::1]:5000"},
		{"/v2/pause/referrers/" + digest, "a/referrers/b/tags/list", digest, ""},
		{"/v2/docker.io/library/hello/blobs/uploads/1234", "a/blobs/uploads", "x", ""},
		{"/v2/a/manifests/b/blobs/c", "Registry.Example:443/x", "y", "Registry.Example:443"},
		{"/v2/a/manifests/", "a//b", "", ""},
		{"/v2/../manifests/x", "..", "x/y", "a/b"},
		{"/v1/_ping", "a/./b", "x", "a?b"},
	} {
		f.Add(s.path, s.name, s.ref, s.ns)
	}
	f.Fuzz(func(t *testing.T, path, name, ref, ns string) {
		if rt, ok := parseRoute(path); ok {
			if again := routePath(rt); again != path && !(rt.kind == routePing && path == "/v2") &&
				rt.kind != routeUpload {
				t.Fatalf("parseRoute(%q) = %+v, which is the path %q", path, rt, again)
			}
			if rt.kind == routeUpload && !strings.HasPrefix(path, "/v2/"+rt.name+"/blobs/uploads") {
				t.Fatalf("parseRoute(%q) = %+v: an upload route elsewhere", path, rt)
			}
		}

		if validName(name) {
			if len(name) > 1024 {
				t.Fatalf("validName accepted a name of %d bytes", len(name))
			}
			for i, c := range strings.Split(name, "/") {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("validName accepted %q, whose element %d is %q", name, i, c)
				}
			}
			if strings.ContainsAny(name, "?#%\\ \t\r\n\x00") {
				t.Fatalf("validName accepted %q", name)
			}
			// peerClient.get puts the name into the URL it asks a peer.
			u := url.URL{Scheme: "https", Host: "10.0.0.11:5443", Path: "/v2/" + name + "/manifests/" + "x"}
			back, err := url.Parse(u.String())
			if err != nil || back.Path != u.Path || back.RawQuery != "" {
				t.Fatalf("the name %q does not survive a peer's request URL: %q (%v)", name, u.String(), err)
			}
			if !strings.Contains(name, "/blobs/uploads") {
				for _, kind := range []routeKind{routeTags, routeManifest, routeBlob, routeReferrers} {
					r := ref
					if kind == routeTags {
						r = ""
					} else if ref == "" || strings.Contains(ref, "/") ||
						(kind == routeBlob && strings.HasPrefix(ref, "uploads")) {
						continue
					}
					want := route{kind: kind, name: name, ref: r}
					got, ok := parseRoute(routePath(want))
					if !ok || got != want {
						t.Fatalf("parseRoute(%q) = %+v, %v; want %+v", routePath(want), got, ok, want)
					}
				}
			}
		}
		if validHost(ns) {
			if ns == "" || len(ns) > 255 || strings.ContainsAny(ns, "/?#%@ \t\r\n\x00") {
				t.Fatalf("validHost accepted %q", ns)
			}
			q, err := url.ParseQuery(url.Values{"ns": {ns}}.Encode())
			if err != nil || q.Get("ns") != ns {
				t.Fatalf("the ns %q does not survive a peer's request URL: %v %v", ns, q, err)
			}
		}
	})
}

// routePath is the path of a route.
func routePath(rt route) string {
	switch rt.kind {
	case routePing:
		return "/v2/"
	case routeCatalog:
		return "/v2/_catalog"
	case routeTags:
		return "/v2/" + rt.name + "/tags/list"
	case routeUpload:
		return "/v2/" + rt.name + "/blobs/uploads"
	}
	return "/v2/" + rt.name + routeSeps[rt.kind] + rt.ref
}
