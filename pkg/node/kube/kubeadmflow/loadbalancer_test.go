package kubeadmflow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// crdAPI answers the pool's kinds with 404 until it has been asked
// notServedFor times: the API server has not served a new CRD yet.
type crdAPI struct {
	recordingAPI
	notServedFor int
	asked        int
	fail         error
}

func (a *crdAPI) ApplyManifest(ctx context.Context, m []byte, fieldManager string) error {
	if strings.Contains(string(m), "\nkind: IPAddressPool\n") {
		a.asked++
		if a.asked <= a.notServedFor {
			return &kubeclient.StatusError{Code: 404, Status: "404 Not Found", Body: "the server could not find the requested resource"}
		}
	}
	if a.fail != nil {
		return a.fail
	}
	return a.recordingAPI.ApplyManifest(ctx, m, fieldManager)
}

func loadBalancerStep(t *testing.T, c *machineconfig.Cluster) *kubeadmStep {
	t.Helper()
	for _, st := range steps(c) {
		if st.name == stepLoadBalancer {
			return &st
		}
	}
	return nil
}

// With a pool in the cluster config, the init node applies MetalLB's
// CRDs, MetalLB from the bundle's images, then the pool once the API
// serves its kinds; without one, or on another role, there is no step.
func TestInitNodeAppliesMetalLB(t *testing.T) {
	ctx := context.Background()
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[`+
		`{"annotations":{"io.containerd.image.name":"quay.io/metallb/controller:v0.14.10"}},`+
		`{"annotations":{"io.containerd.image.name":"quay.io/metallb/speaker:v0.14.10"}}]}`)
	withRelease(t, f, "0.3.0")
	c := initNode()
	assert.Nil(t, loadBalancerStep(t, c.Cluster), "no pool, no MetalLB")
	c.Cluster.LoadBalancer = &machineconfig.LoadBalancer{Addresses: []string{"10.77.0.100-10.77.0.120"}}
	st := loadBalancerStep(t, c.Cluster)
	require.NotNil(t, st)
	names := stepNames(c.Cluster)
	assert.Equal(t, []string{stepLoadBalancer, "admin kubeconfig"}, names[len(names)-2:], "the admin kubeconfig stays last")

	api := &crdAPI{notServedFor: 3}
	f.API = func(string) (APIClient, error) { return api, nil }
	require.NoError(t, st.own(ctx, f, c))
	require.Len(t, api.applied, 3)
	assert.Equal(t, string(addons.MetalLBCRDs), api.applied[0], "the CRDs first")
	assert.Contains(t, api.applied[1], "image: quay.io/metallb/controller:v0.14.10\n", "the bundle's image")
	assert.Contains(t, api.applied[1], "image: quay.io/metallb/speaker:v0.14.10\n", "the bundle's image")
	assert.Contains(t, api.applied[2], "- 10.77.0.100-10.77.0.120\n")
	assert.Equal(t, 4, api.asked, "the pool waited for its kinds to be served")
	assert.Contains(t, api.record, addonLoadBalancer, "recorded once applied")

	for _, role := range []string{machineconfig.RoleControlPlane, machineconfig.RoleWorker} {
		assert.Nil(t, loadBalancerStep(t, &machineconfig.Cluster{Role: role, LoadBalancer: c.Cluster.LoadBalancer}), role)
	}
}

// Another error than a kind not served yet fails the step at once, with
// what it was applying.
func TestMetalLBFailure(t *testing.T) {
	f := testFlow(t, nil)
	withRelease(t, f, "0.3.0")
	c := initNode()
	c.Cluster.LoadBalancer = &machineconfig.LoadBalancer{Addresses: []string{"10.77.0.100-10.77.0.120"}}
	api := &crdAPI{fail: errors.New("403 Forbidden")}
	f.API = func(string) (APIClient, error) { return api, nil }
	err := loadBalancerStep(t, c.Cluster).own(context.Background(), f, c)
	require.ErrorContains(t, err, "metallb's CRDs: 403 Forbidden")
	assert.Empty(t, api.record, "not recorded when it failed")

	api = &crdAPI{notServedFor: 1 << 30}
	f.API = func(string) (APIClient, error) { return api, nil }
	now := time.Now()
	f.Clock = host.ClockFunc(func() time.Time { now = now.Add(crdEstablishWait / 4); return now })
	err = loadBalancerStep(t, c.Cluster).own(context.Background(), f, c)
	require.ErrorContains(t, err, "metallb's address pool")
	assert.ErrorIs(t, err, kubeclient.ErrNotFound)
}
