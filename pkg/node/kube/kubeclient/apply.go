package kubeclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"
)

// resource is where the API keeps objects of one kind.
type resource struct {
	plural     string
	namespaced bool
}

// resources are the kinds ApplyManifest knows, by apiVersion and kind:
// those of the add-on manifests a node applies (pkg/node/kube/addons). A client
// that asked the API's discovery for them would pay a round of requests per
// manifest, as kubectl does; the add-ons' kinds are known when the image
// is built.
var resources = map[string]resource{
	"v1/Namespace":                                     {"namespaces", false},
	"v1/ServiceAccount":                                {"serviceaccounts", true},
	"v1/ConfigMap":                                     {"configmaps", true},
	"v1/Secret":                                        {"secrets", true},
	"v1/Service":                                       {"services", true},
	"apps/v1/DaemonSet":                                {"daemonsets", true},
	"apps/v1/Deployment":                               {"deployments", true},
	"storage.k8s.io/v1/StorageClass":                   {"storageclasses", false},
	"apiregistration.k8s.io/v1/APIService":             {"apiservices", false},
	"rbac.authorization.k8s.io/v1/ClusterRole":         {"clusterroles", false},
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding":  {"clusterrolebindings", false},
	"rbac.authorization.k8s.io/v1/Role":                {"roles", true},
	"rbac.authorization.k8s.io/v1/RoleBinding":         {"rolebindings", true},
	"apiextensions.k8s.io/v1/CustomResourceDefinition": {"customresourcedefinitions", false},
	"metallb.io/v1beta1/IPAddressPool":                 {"ipaddresspools", true},
	"metallb.io/v1beta1/L2Advertisement":               {"l2advertisements", true},
}

// Object is one document of a manifest, as ApplyManifest sends it.
type Object struct {
	APIVersion, Kind, Namespace, Name string
	// Path is the object's path in the API.
	Path string
	body map[string]any
}

func (o Object) String() string {
	if o.Namespace != "" {
		return o.Kind + " " + o.Namespace + "/" + o.Name
	}
	return o.Kind + " " + o.Name
}

// ParseManifest reads a multi-document YAML manifest into the objects it
// holds, in order, empty documents skipped. A namespaced object without a
// namespace is in "default", as kubectl has it. An error names the
// document (from 1) and what is wrong with it: a kind ApplyManifest does
// not know, no name.
func ParseManifest(manifest []byte) ([]Object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	var out []Object
	for doc := 1; ; doc++ {
		var body map[string]any
		err := dec.Decode(&body)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if body == nil {
			continue
		}
		o, err := object(body)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		out = append(out, o)
	}
}

func object(body map[string]any) (Object, error) {
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	meta, _ := body["metadata"].(map[string]any)
	o := Object{APIVersion: str(body, "apiVersion"), Kind: str(body, "kind"), Name: str(meta, "name"), Namespace: str(meta, "namespace"), body: body}
	r, ok := resources[o.APIVersion+"/"+o.Kind]
	if !ok {
		return Object{}, fmt.Errorf("apiVersion %q kind %q: not a kind this client applies (add it to kubeclient's resources)", o.APIVersion, o.Kind)
	}
	if o.Name == "" {
		return Object{}, fmt.Errorf("%s: metadata.name is empty", o.Kind)
	}
	switch {
	case !r.namespaced && o.Namespace != "":
		return Object{}, fmt.Errorf("%s %s: metadata.namespace %q on a kind that has none", o.Kind, o.Name, o.Namespace)
	case r.namespaced && o.Namespace == "":
		o.Namespace = "default"
		meta["namespace"] = o.Namespace
	}
	group := "/api/" + o.APIVersion
	if strings.Contains(o.APIVersion, "/") {
		group = "/apis/" + o.APIVersion
	}
	o.Path = group
	if r.namespaced {
		o.Path += "/namespaces/" + url.PathEscape(o.Namespace)
	}
	o.Path += "/" + r.plural + "/" + url.PathEscape(o.Name)
	return o, nil
}

// ApplyManifest applies each object of a manifest (ParseManifest) with
// server-side apply as fieldManager, taking over fields another manager
// set (what `kubectl apply --server-side --force-conflicts
// --field-manager=fieldManager` does), one object after another in the
// manifest's order. It parses the whole manifest before it applies
// anything. It is kubectl's apply without kubectl: on a slow node, a
// kubectl process spends seconds of CPU starting and asking the API's
// discovery before its first object.
func (c *Client) ApplyManifest(ctx context.Context, manifest []byte, fieldManager string) error {
	objs, err := ParseManifest(manifest)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	q := url.Values{"fieldManager": {fieldManager}, "force": {"true"}}
	for _, o := range objs {
		rq := request{method: http.MethodPatch, path: o.Path, query: q, contentType: "application/apply-patch+yaml", body: o.body}
		if err := c.send(ctx, rq, nil); err != nil {
			return fmt.Errorf("apply %s: %w", o, err)
		}
	}
	return nil
}
