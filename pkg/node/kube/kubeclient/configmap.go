package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// ConfigMap is a v1 ConfigMap's name and string data.
type ConfigMap struct {
	Namespace, Name string
	// ResourceVersion is the version read; an update with it fails with
	// ErrConflict when the ConfigMap changed since.
	ResourceVersion string
	Data            map[string]string
}

type configMapJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion,omitempty"`
	} `json:"metadata"`
	Data map[string]string `json:"data,omitempty"`
}

func (m ConfigMap) json() configMapJSON {
	j := configMapJSON{APIVersion: "v1", Kind: "ConfigMap", Data: m.Data}
	j.Metadata.Name, j.Metadata.Namespace, j.Metadata.ResourceVersion = m.Name, m.Namespace, m.ResourceVersion
	return j
}

func (j configMapJSON) configMap() ConfigMap {
	return ConfigMap{Namespace: j.Metadata.Namespace, Name: j.Metadata.Name, ResourceVersion: j.Metadata.ResourceVersion, Data: j.Data}
}

func configMapsPath(namespace string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/configmaps"
}

// ConfigMap reads one ConfigMap; ErrNotFound when there is none.
func (c *Client) ConfigMap(ctx context.Context, namespace, name string) (ConfigMap, error) {
	var j configMapJSON
	if err := c.get(ctx, configMapsPath(namespace)+"/"+url.PathEscape(name), &j); err != nil {
		return ConfigMap{}, fmt.Errorf("read configmap %s/%s: %w", namespace, name, err)
	}
	return j.configMap(), nil
}

// CreateConfigMap creates a ConfigMap; ErrConflict when it exists already.
func (c *Client) CreateConfigMap(ctx context.Context, m ConfigMap) (ConfigMap, error) {
	in := m.json()
	in.Metadata.ResourceVersion = ""
	var out configMapJSON
	if err := c.send(ctx, request{method: http.MethodPost, path: configMapsPath(m.Namespace), body: in}, &out); err != nil {
		return ConfigMap{}, fmt.Errorf("create configmap %s/%s: %w", m.Namespace, m.Name, err)
	}
	return out.configMap(), nil
}

// UpdateConfigMap replaces a ConfigMap read at m.ResourceVersion;
// ErrConflict when it changed since.
func (c *Client) UpdateConfigMap(ctx context.Context, m ConfigMap) (ConfigMap, error) {
	if m.ResourceVersion == "" {
		return ConfigMap{}, fmt.Errorf("update configmap %s/%s: no resourceVersion: read it first", m.Namespace, m.Name)
	}
	var out configMapJSON
	path := configMapsPath(m.Namespace) + "/" + url.PathEscape(m.Name)
	if err := c.send(ctx, request{method: http.MethodPut, path: path, body: m.json()}, &out); err != nil {
		return ConfigMap{}, fmt.Errorf("update configmap %s/%s: %w", m.Namespace, m.Name, err)
	}
	return out.configMap(), nil
}
