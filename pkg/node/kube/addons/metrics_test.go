package addons

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/node/kube/csrsigner"
	"github.com/terrarium-os/terrarium/pkg/node/kube/nodecert"
)

// testCA is a cluster CA for the tests.
func testCA(t *testing.T) (*x509.Certificate, []byte, MetricsServerInput) {
	t.Helper()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	certPEM, keyPEM, err := nodecert.Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: "kubernetes"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:  x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
	}, nil, nil)
	require.NoError(t, err)
	ca, key, err := csrsigner.LoadCA(certPEM, keyPEM)
	require.NoError(t, err)
	return ca, certPEM, MetricsServerInput{CA: ca, CAKey: key, DNSDomain: "cluster.local", Now: now}
}

func TestMetricsServer(t *testing.T) {
	ca, caPEM, in := testCA(t)
	in.Image = "registry.k8s.io/metrics-server/metrics-server:v0.8.1"
	m, err := MetricsServer(in)
	require.NoError(t, err)

	byKind := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(string(m)))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		byKind[doc["kind"].(string)] = doc
	}

	// The serving pair: issued by the cluster CA for the Service's names,
	// for serving only, as long as the CA.
	data := byKind["Secret"]["data"].(map[string]any)
	crtPEM, err := base64.StdEncoding.DecodeString(data["tls.crt"].(string))
	require.NoError(t, err)
	keyPEM, err := base64.StdEncoding.DecodeString(data["tls.key"].(string))
	require.NoError(t, err)
	_, err = tls.X509KeyPair(crtPEM, keyPEM)
	require.NoError(t, err, "the Secret holds a pair")
	b, _ := pem.Decode(crtPEM)
	require.NotNil(t, b)
	cert, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, name := range []string{"metrics-server.kube-system.svc", "metrics-server.kube-system.svc.cluster.local"} {
		_, err = cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: in.Now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, name)
	}
	assert.Equal(t, ca.NotAfter, cert.NotAfter)
	assert.False(t, cert.IsCA)

	// The API server checks it against the CA.
	spec := byKind["APIService"]["spec"].(map[string]any)
	assert.NotContains(t, spec, "insecureSkipTLSVerify")
	bundle, err := base64.StdEncoding.DecodeString(spec["caBundle"].(string))
	require.NoError(t, err)
	assert.Equal(t, string(caPEM), string(bundle))

	// metrics-server checks each kubelet against the CA.
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext struct {
						FSGroup int `yaml:"fsGroup"`
					} `yaml:"securityContext"`
					Containers []struct {
						Image           string
						Args            []string
						SecurityContext struct {
							RunAsUser int `yaml:"runAsUser"`
						} `yaml:"securityContext"`
						LivenessProbe struct {
							TimeoutSeconds   int `yaml:"timeoutSeconds"`
							PeriodSeconds    int `yaml:"periodSeconds"`
							FailureThreshold int `yaml:"failureThreshold"`
						} `yaml:"livenessProbe"`
					}
					Volumes []struct {
						Name   string
						Secret struct {
							DefaultMode int `yaml:"defaultMode"`
						}
					}
				}
			}
		}
	}
	raw, err := yaml.Marshal(byKind["Deployment"])
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &dep))
	c := dep.Spec.Template.Spec.Containers[0]
	assert.Equal(t, in.Image, c.Image)
	assert.Contains(t, c.Args, "--kubelet-certificate-authority=/kubelet-ca/ca.crt")
	assert.Contains(t, c.Args, "--kubelet-preferred-address-types=InternalIP")
	for _, a := range c.Args {
		assert.NotContains(t, a, "insecure")
	}
	// A busy node's late answers are not a reason to restart it: a minute
	// of failed probes, 5 s each.
	lp := c.LivenessProbe
	assert.GreaterOrEqual(t, lp.TimeoutSeconds, 5)
	assert.GreaterOrEqual(t, lp.PeriodSeconds*lp.FailureThreshold, 60)
	// Its process (not root) reads its key through its group, which no
	// one else has.
	pod := dep.Spec.Template.Spec
	assert.NotZero(t, c.SecurityContext.RunAsUser)
	assert.Equal(t, c.SecurityContext.RunAsUser, pod.SecurityContext.FSGroup, "the key's group is the process's")
	for _, v := range pod.Volumes {
		if v.Name == "tls" {
			assert.Equal(t, 0o440, v.Secret.DefaultMode, "the key readable by owner and group only")
		}
	}
}

func TestMetricsServerRefusals(t *testing.T) {
	_, _, in := testCA(t)
	m, err := MetricsServer(in)
	require.NoError(t, err)
	assert.Contains(t, string(m), "image: "+DefaultMetricsServerImage)

	noCA := in
	noCA.CA = nil
	_, err = MetricsServer(noCA)
	assert.ErrorContains(t, err, "the cluster CA is required")
	noDomain := in
	noDomain.DNSDomain = ""
	_, err = MetricsServer(noDomain)
	assert.ErrorContains(t, err, "DNS domain")
}

// Without its serving pair the manifest is the same at every render and
// at every time, holds no key, and changes with what decides the add-on.
func TestMetricsServerWithoutPair(t *testing.T) {
	_, _, in := testCA(t)
	a, err := MetricsServerWithoutPair(in)
	require.NoError(t, err)
	later := in
	later.Now = in.Now.Add(48 * time.Hour)
	b, err := MetricsServerWithoutPair(later)
	require.NoError(t, err)
	assert.Equal(t, string(a), string(b), "the same add-on rendered twice")
	assert.NotContains(t, string(a), "PRIVATE KEY")
	assert.NotContains(t, string(a), base64.StdEncoding.EncodeToString([]byte("-----BEGIN")), "no PEM block in the Secret")

	newer := in
	newer.Image = "registry.k8s.io/metrics-server/metrics-server:v0.8.1"
	c, err := MetricsServerWithoutPair(newer)
	require.NoError(t, err)
	assert.NotEqual(t, string(a), string(c), "another image is another add-on")

	full, err := MetricsServer(in)
	require.NoError(t, err)
	kinds := func(m string) []string {
		var out []string
		dec := yaml.NewDecoder(strings.NewReader(m))
		for {
			var doc map[string]any
			if dec.Decode(&doc) != nil {
				return out
			}
			out = append(out, doc["kind"].(string))
		}
	}
	assert.Equal(t, kinds(string(full)), kinds(string(a)), "the same objects as the manifest with its pair")

	noCA := in
	noCA.CA = nil
	_, err = MetricsServerWithoutPair(noCA)
	assert.ErrorContains(t, err, "the cluster CA is required")
}
