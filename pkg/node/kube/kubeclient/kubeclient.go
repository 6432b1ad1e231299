// Package kubeclient asks a Kubernetes API server about its nodes, with the
// credentials of a kubeconfig file as kubeadm writes them (one cluster, one
// client certificate, inline or in files).
//
// firstboot polls node readiness every few seconds until its node is Ready.
// Running kubectl for that costs a 50 MB program's start-up each time,
// about half a second of CPU under emulation (QEMU without KVM), on a node
// whose API server is starting on the same CPUs. This client keeps one
// TLS connection for all polls and decodes only the fields it reads.
package kubeclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// kubeconfig is the part of a kubeconfig file the client uses.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server                   string `yaml:"server"`
			CertificateAuthority     string `yaml:"certificate-authority"`
			CertificateAuthorityData string `yaml:"certificate-authority-data"`
			// TLSServerName is the name the server's certificate is
			// checked for, when not the server's host (a tunnel).
			TLSServerName string `yaml:"tls-server-name"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			ClientCertificate     string `yaml:"client-certificate"`
			ClientCertificateData string `yaml:"client-certificate-data"`
			ClientKey             string `yaml:"client-key"`
			ClientKeyData         string `yaml:"client-key-data"`
			// Token is a bearer token (a bootstrap token, id.secret).
			Token string `yaml:"token"`
		} `yaml:"user"`
	} `yaml:"users"`
	Contexts []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster string `yaml:"cluster"`
			User    string `yaml:"user"`
		} `yaml:"context"`
	} `yaml:"contexts"`
}

// Client talks to one API server as one user.
type Client struct {
	server *url.URL
	http   *http.Client
	// token is the user's bearer token, when it has one instead of a
	// client certificate.
	token string
}

// Timeout bounds one request, TLS handshake included: generous, since a
// loaded API server under emulation takes seconds for a handshake.
const Timeout = 20 * time.Second

// New reads the kubeconfig in data. Its current context (or its only
// context) names the cluster and the user; the user authenticates with a
// client certificate or a bearer token. readFile reads the files a kubeconfig may refer to
// (certificate-authority, client-certificate, client-key), so that a
// caller can resolve them under another root.
func New(data []byte, readFile func(string) ([]byte, error)) (*Client, error) {
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("parse kubeconfig: %w", err)
	}
	clusterName, userName, err := kc.selected()
	if err != nil {
		return nil, err
	}
	var server, caData, caFile, serverName string
	found := false
	for _, c := range kc.Clusters {
		if c.Name == clusterName {
			server, caData, caFile, serverName, found = c.Cluster.Server, c.Cluster.CertificateAuthorityData, c.Cluster.CertificateAuthority, c.Cluster.TLSServerName, true
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig: context names cluster %q, which is not in clusters", clusterName)
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("kubeconfig: cluster %q: server %q is not an https:// URL", clusterName, server)
	}
	caPEM, err := inlineOrFile(caData, caFile, readFile)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: cluster %q: certificate authority: %w", clusterName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("kubeconfig: cluster %q: no PEM certificate in its certificate authority", clusterName)
	}
	var (
		certs []tls.Certificate
		token string
	)
	found = false
	for _, us := range kc.Users {
		if us.Name != userName {
			continue
		}
		found = true
		if us.User.Token != "" {
			token = us.User.Token
			continue
		}
		certPEM, err := inlineOrFile(us.User.ClientCertificateData, us.User.ClientCertificate, readFile)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: user %q: client certificate: %w", userName, err)
		}
		keyPEM, err := inlineOrFile(us.User.ClientKeyData, us.User.ClientKey, readFile)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: user %q: client key: %w", userName, err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: user %q: %w", userName, err)
		}
		certs = []tls.Certificate{cert}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig: context names user %q, which is not in users", userName)
	}
	return &Client{server: u, token: token, http: &http.Client{
		Timeout: Timeout,
		Transport: &http.Transport{
			Proxy: nil, // the API server is always reached directly
			TLSClientConfig: &tls.Config{
				RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12, ServerName: serverName,
			},
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     time.Minute,
		},
	}}, nil
}

// selected returns the cluster and user of the current context, or of the
// only context when none is current.
func (kc *kubeconfig) selected() (cluster, user string, err error) {
	name := kc.CurrentContext
	if name == "" {
		if len(kc.Contexts) != 1 {
			return "", "", fmt.Errorf("kubeconfig: no current-context and %d contexts", len(kc.Contexts))
		}
		name = kc.Contexts[0].Name
	}
	for _, c := range kc.Contexts {
		if c.Name == name {
			return c.Context.Cluster, c.Context.User, nil
		}
	}
	return "", "", fmt.Errorf("kubeconfig: current-context %q is not in contexts", name)
}

// inlineOrFile decodes base64 data, or else reads the file.
func inlineOrFile(data, file string, readFile func(string) ([]byte, error)) ([]byte, error) {
	switch {
	case data != "":
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, fmt.Errorf("decode base64: %w", err)
		}
		return b, nil
	case file != "":
		b, err := readFile(file)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", file, err)
		}
		return b, nil
	}
	return nil, errors.New("neither inline data nor a file")
}

// Node is what the client reads of a Node object.
type Node struct {
	Name  string
	Ready bool
	// ControlPlane: the node carries kubeadm's control-plane role label.
	ControlPlane bool
	// Unschedulable: the node is cordoned.
	Unschedulable bool
	// KubeletVersion is the version its kubelet reports.
	KubeletVersion string
	// Worker: the node carries the worker role label (WorkerLabel).
	Worker bool
	// Addresses are the addresses its kubelet reports (status.addresses).
	Addresses []NodeAddress
}

// NodeAddress is one of a Node's addresses: Type is Hostname,
// InternalIP, ExternalIP, InternalDNS or ExternalDNS.
type NodeAddress struct {
	Type, Address string
}

// The role labels: kubeadm puts the control plane's on control planes; a
// control plane puts the worker's on the others (a kubelet may not set a
// node-role label on its own Node under NodeRestriction).
const (
	controlPlaneLabel = "node-role.kubernetes.io/control-plane"
	WorkerLabel       = "node-role.kubernetes.io/worker"
)

// nodeJSON is the part of a Node object Node comes from.
type nodeJSON struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Unschedulable bool `json:"unschedulable"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		NodeInfo struct {
			KubeletVersion string `json:"kubeletVersion"`
		} `json:"nodeInfo"`
		Addresses []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses"`
	} `json:"status"`
}

func (n nodeJSON) node() Node {
	_, cp := n.Metadata.Labels[controlPlaneLabel]
	_, worker := n.Metadata.Labels[WorkerLabel]
	out := Node{Name: n.Metadata.Name, ControlPlane: cp, Worker: worker, Unschedulable: n.Spec.Unschedulable,
		KubeletVersion: n.Status.NodeInfo.KubeletVersion}
	for _, a := range n.Status.Addresses {
		out.Addresses = append(out.Addresses, NodeAddress{Type: a.Type, Address: a.Address})
	}
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			out.Ready = c.Status == "True"
		}
	}
	return out
}

// Nodes lists every node. It needs a user allowed to list nodes (a
// kubelet may only get its own).
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var list struct {
		Items []nodeJSON `json:"items"`
	}
	if err := c.get(ctx, "/api/v1/nodes", &list); err != nil {
		return nil, err
	}
	nodes := make([]Node, 0, len(list.Items))
	for _, n := range list.Items {
		nodes = append(nodes, n.node())
	}
	return nodes, nil
}

// Node gets one node by name.
func (c *Client) Node(ctx context.Context, name string) (Node, error) {
	var n nodeJSON
	if err := c.get(ctx, "/api/v1/nodes/"+url.PathEscape(name), &n); err != nil {
		return Node{}, err
	}
	return n.node(), nil
}

// Cordon marks a node unschedulable (or, with false, schedulable again)
// with a merge patch of its spec.unschedulable, as kubectl cordon does. A
// kubelet's own credentials may patch its own node.
func (c *Client) Cordon(ctx context.Context, name string, unschedulable bool) error {
	patch := map[string]any{"spec": map[string]any{"unschedulable": unschedulable}}
	err := c.send(ctx, request{method: http.MethodPatch, path: "/api/v1/nodes/" + url.PathEscape(name),
		contentType: "application/merge-patch+json", body: patch}, nil)
	if err != nil {
		return fmt.Errorf("set node %s unschedulable=%t: %w", name, unschedulable, err)
	}
	return nil
}

// LabelNode sets labels on a node with a merge patch of its
// metadata.labels, as kubectl label does; the node's other labels stay. It
// needs a user allowed to patch nodes: under NodeRestriction a kubelet may
// not set a node-role label, not even on its own Node.
func (c *Client) LabelNode(ctx context.Context, name string, labels map[string]string) error {
	patch := map[string]any{"metadata": map[string]any{"labels": labels}}
	err := c.send(ctx, request{method: http.MethodPatch, path: "/api/v1/nodes/" + url.PathEscape(name),
		contentType: "application/merge-patch+json", body: patch}, nil)
	if err != nil {
		return fmt.Errorf("label node %s: %w", name, err)
	}
	return nil
}

// DeleteNode deletes a node's object (kubectl delete node): the node is
// gone for good and a replacement will register under its name. It needs
// a user allowed to delete nodes; a node that does not exist is
// ErrNotFound.
func (c *Client) DeleteNode(ctx context.Context, name string) error {
	if err := c.send(ctx, request{method: http.MethodDelete, path: "/api/v1/nodes/" + url.PathEscape(name)}, nil); err != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return nil
}

// At returns a client of the same user, trusting the same CA, for the API
// server at hostport (host:port) instead of the kubeconfig's: one control
// plane of several behind the node's balancer.
func (c *Client) At(hostport string) *Client {
	u := *c.server
	u.Host = hostport
	return &Client{server: &u, http: c.http, token: c.token}
}

// Version is the Kubernetes version the API server runs: the gitVersion
// of its /version, which every user may read.
func (c *Client) Version(ctx context.Context) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := c.get(ctx, "/version", &v); err != nil {
		return "", err
	}
	if v.GitVersion == "" {
		return "", fmt.Errorf("%s/version names no gitVersion", c.server)
	}
	return v.GitVersion, nil
}

// CloseIdleConnections closes the kept-alive connection.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// get decodes the JSON answer to GET path into v.
func (c *Client) get(ctx context.Context, path string, v any) error {
	return c.do(ctx, http.MethodGet, path, nil, v)
}

// do sends a request with an optional JSON body and decodes the JSON
// answer into v. An answer other than 200 or 201 is a *StatusError.
func (c *Client) do(ctx context.Context, method, path string, in, v any) error {
	return c.send(ctx, request{method: method, path: path, body: in}, v)
}

// request is one API call: path is escaped by the caller, query is added
// as is, and body is sent as JSON under contentType (default
// application/json; a PATCH names its patch type).
type request struct {
	method, path string
	query        url.Values
	contentType  string
	body         any
}

// newRequest is a request of the API as the client's user, for JSON.
func (c *Client) newRequest(ctx context.Context, method string, u *url.URL, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send makes the call rq and decodes the JSON answer into v, unless v is
// nil. An answer other than 200 or 201 is a *StatusError.
func (c *Client) send(ctx context.Context, rq request, v any) error {
	u := c.server.JoinPath(rq.path)
	if len(rq.query) > 0 {
		u.RawQuery = rq.query.Encode()
	}
	method := rq.method
	var body io.Reader
	if rq.body != nil {
		b, err := json.Marshal(rq.body)
		if err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, u, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, u, body)
	if err != nil {
		return err
	}
	if rq.body != nil {
		ct := rq.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, u, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return &StatusError{Method: method, URL: u.String(), Code: resp.StatusCode, Status: resp.Status,
			Body: strings.TrimSpace(string(answer[:min(len(answer), 300)]))}
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(answer, v); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, u, err)
	}
	return nil
}
