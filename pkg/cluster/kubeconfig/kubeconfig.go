// Package kubeconfig mints the operator's own kubeconfig: a client
// certificate signed by the cluster CA, with a lifetime, for a user in
// kubeadm's cluster-admins group, and the cluster's CA to check the API
// server by. Everything is inline, so the one file is all kubectl needs.
//
// The group is kubeadm's "kubeadm:cluster-admins", which `kubeadm init`
// binds to the cluster-admin role (kubeadm 1.29 and later), not
// "system:masters": a user in system:masters passes every authorization
// check and cannot be locked out by RBAC, so kubeadm keeps it for its
// break-glass super-admin.conf alone.
package kubeconfig

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
)

// AdminsGroup is the group `kubeadm init` binds to cluster-admin.
const AdminsGroup = "kubeadm:cluster-admins"

// DefaultUser and DefaultTTL are what `imagebuild config cluster` mints.
const (
	DefaultUser = "terrarium-operator"
	DefaultTTL  = 24 * time.Hour
)

// Options say whom the kubeconfig is for and where it points.
type Options struct {
	// Server is the API server's URL, https://HOST:PORT.
	Server string
	// User is the certificate's common name, the user Kubernetes sees.
	User string
	// TTL is how long the certificate works.
	TTL time.Duration
	Now time.Time
	// Random is where keys and serials come from; nil is crypto/rand.
	Random io.Reader
}

// Minted is a kubeconfig and when its certificate stops working.
type Minted struct {
	Data     []byte
	NotAfter time.Time
}

// Admin mints a cluster-admin kubeconfig from the cluster's secrets.
func Admin(s *clustersecrets.Secrets, o Options) (Minted, error) {
	u, err := url.Parse(o.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Path != "" && u.Path != "/" {
		return Minted{}, fmt.Errorf("server %q: give the API server as https://HOST:PORT, like https://10.77.0.10:6443", o.Server)
	}
	c, err := s.SignClient(o.User, []string{AdminsGroup}, o.Now, o.TTL, o.Random)
	if err != nil {
		return Minted{}, err
	}
	cluster, ctx := s.ClusterName, o.User+"@"+s.ClusterName
	doc := file{
		APIVersion: "v1", Kind: "Config", CurrentContext: ctx,
		Clusters: []namedCluster{{Name: cluster, Cluster: clusterEntry{Server: u.String(), CertificateAuthorityData: b64(s.CA.Cert)}}},
		Users:    []namedUser{{Name: o.User, User: userEntry{ClientCertificateData: b64(c.Cert), ClientKeyData: b64(c.Key)}}},
		Contexts: []namedContext{{Name: ctx, Context: contextEntry{Cluster: cluster, User: o.User}}},
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Cluster admin %q of cluster %q, valid until %s.\n# Mint another: imagebuild config kubeconfig --secrets SECRETS --server %s\n",
		o.User, s.ClusterName, c.NotAfter.UTC().Format(time.RFC3339), u.String())
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return Minted{}, fmt.Errorf("encode kubeconfig: %w", err)
	}
	if err := enc.Close(); err != nil {
		return Minted{}, fmt.Errorf("encode kubeconfig: %w", err)
	}
	return Minted{Data: buf.Bytes(), NotAfter: c.NotAfter}, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// file is a kubeconfig (clientcmd's v1 Config), the fields written.
type file struct {
	APIVersion     string         `yaml:"apiVersion"`
	Kind           string         `yaml:"kind"`
	CurrentContext string         `yaml:"current-context"`
	Clusters       []namedCluster `yaml:"clusters"`
	Users          []namedUser    `yaml:"users"`
	Contexts       []namedContext `yaml:"contexts"`
}

type namedCluster struct {
	Name    string       `yaml:"name"`
	Cluster clusterEntry `yaml:"cluster"`
}

type clusterEntry struct {
	Server                   string `yaml:"server"`
	CertificateAuthorityData string `yaml:"certificate-authority-data"`
}

type namedUser struct {
	Name string    `yaml:"name"`
	User userEntry `yaml:"user"`
}

type userEntry struct {
	ClientCertificateData string `yaml:"client-certificate-data"`
	ClientKeyData         string `yaml:"client-key-data"`
}

type namedContext struct {
	Name    string       `yaml:"name"`
	Context contextEntry `yaml:"context"`
}

type contextEntry struct {
	Cluster string `yaml:"cluster"`
	User    string `yaml:"user"`
}
