package kubeadmflow

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// oneNode answers Node for one name: Ready for readyPolls questions, then
// not Ready; any other name is not found. Leases are not asked here.
type oneNode struct {
	name       string
	readyPolls int
	err        error
	asked      int
	kubeconfig string
}

func (o *oneNode) Nodes(context.Context) ([]kubeclient.Node, error) {
	return nil, errors.New("not asked")
}

func (o *oneNode) ApplyManifest(context.Context, []byte, string) error {
	return errors.New("not asked")
}

func (o *oneNode) ConfigMap(context.Context, string, string) (kubeclient.ConfigMap, error) {
	return kubeclient.ConfigMap{}, errors.New("not asked")
}
func (o *oneNode) Node(_ context.Context, name string) (kubeclient.Node, error) {
	o.asked++
	if o.err != nil {
		return kubeclient.Node{}, o.err
	}
	if name != o.name {
		return kubeclient.Node{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	return kubeclient.Node{Name: name, Ready: o.asked <= o.readyPolls}, nil
}
func (o *oneNode) Lease(context.Context, string, string) (kubeclient.Lease, error) {
	return kubeclient.Lease{}, errors.New("not asked")
}
func (o *oneNode) CreateLease(context.Context, kubeclient.Lease) (kubeclient.Lease, error) {
	return kubeclient.Lease{}, errors.New("not asked")
}
func (o *oneNode) UpdateLease(context.Context, kubeclient.Lease) (kubeclient.Lease, error) {
	return kubeclient.Lease{}, errors.New("not asked")
}

func TestWaitForStaleNode(t *testing.T) {
	cfg := &machineconfig.Config{Hostname: "w-1", Cluster: &machineconfig.Cluster{
		Name: "lab", Role: machineconfig.RoleWorker, Token: "abcdef.0123456789abcdef", CACert: "-----BEGIN CERTIFICATE-----\n",
	}}
	tests := []struct {
		name    string
		api     *oneNode
		wantErr string
		report  string
	}{
		{"no Node of this name", &oneNode{name: "w-2"}, "", ""},
		{"the old Node goes not Ready", &oneNode{name: "w-1", readyPolls: 5}, "", "gone: the old Node w-1 is no longer Ready"},
		{"another machine under this name", &oneNode{name: "w-1", readyPolls: 1 << 30}, "another machine runs under this name", "waiting: a Node named w-1 is Ready"},
		{"the API does not answer: kubelet-start decides", &oneNode{err: errors.New("connection refused")}, "", "skipped: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFlow(t, nil)
			now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			f.Clock = host.ClockFunc(func() time.Time { now = now.Add(10 * time.Second); return now })
			f.API = func(kubeconfig string) (APIClient, error) {
				tt.api.kubeconfig = kubeconfig
				b, err := os.ReadFile(f.Path(kubeconfig))
				require.NoError(t, err, "the join kubeconfig is written before it is used")
				assert.Contains(t, string(b), "token: abcdef.0123456789abcdef")
				assert.Contains(t, string(b), "server: https://127.0.0.1:")
				return tt.api, nil
			}
			got := reports(f)
			err := waitForStaleNode(context.Background(), f, cfg)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), "kubectl delete node w-1")
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, JoinKubeconfig, tt.api.kubeconfig)
			assert.NoFileExists(t, f.Path(JoinKubeconfig), "the token's kubeconfig is removed after the step")
			if tt.report != "" {
				assert.Contains(t, strings.Join(*got, "\n"), stepStaleNode+": "+tt.report)
			}
		})
	}
}
