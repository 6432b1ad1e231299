package addons

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetalLB(t *testing.T) {
	m, pool, err := MetalLB(MetalLBInput{
		ControllerImage: "quay.io/metallb/controller:v0.14.9", SpeakerImage: "quay.io/metallb/speaker:v0.14.9",
		Addresses: []string{"10.77.0.100-10.77.0.120", "10.77.0.128/28"},
	})
	require.NoError(t, err)
	s := string(m)
	for _, want := range []string{
		"image: quay.io/metallb/controller:v0.14.9\n",
		// No validating webhook: nothing in the cluster calls into a pod
		// to admit a pool, and no certificate to rotate.
		"--webhook-mode=disabled", "--disable-cert-rotation",
		// Every node answers, control planes included.
		"--ignore-exclude-lb",
		// The speaker answers on the cluster's link only.
		"command: [/metallb-link, -node-ip, $(NODE_IP), -o, /etc/metallb/excludel2.yaml]",
		"pod-security.kubernetes.io/enforce: privileged",
		"capabilities: {add: [NET_RAW], drop: [ALL]}",
	} {
		assert.Contains(t, s, want)
	}
	assert.Equal(t, 2, strings.Count(s, "image: quay.io/metallb/speaker:v0.14.9\n"), "the speaker and its init container")
	assert.NotContains(t, s, "ValidatingWebhookConfiguration")
	assert.NotContains(t, s, "metallb-excludel2", "upstream's exclusion list is replaced, not mounted")
	assert.Contains(t, string(pool), "    - 10.77.0.100-10.77.0.120\n    - 10.77.0.128/28\n")
	assert.Contains(t, string(pool), "ipAddressPools: [terrarium]")

	_, _, err = MetalLB(MetalLBInput{})
	assert.ErrorContains(t, err, "the pool has no addresses")
	d, _, err := MetalLB(MetalLBInput{Addresses: []string{"10.77.0.100/32"}})
	require.NoError(t, err)
	assert.Contains(t, string(d), "image: "+DefaultMetalLBControllerImage+"\n")
}
