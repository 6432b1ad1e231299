package noderole

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

var controlPlanes = []string{"10.77.0.10", "10.77.0.11"}

func node(name, ip string, edit func(*kubeclient.Node)) kubeclient.Node {
	n := kubeclient.Node{Name: name, Addresses: []kubeclient.NodeAddress{{Type: "InternalIP", Address: ip}, {Type: "Hostname", Address: name}}}
	if edit != nil {
		edit(&n)
	}
	return n
}

func TestIsWorker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		node   kubeclient.Node
		worker bool
	}{
		{"a worker", node("w-1", "10.77.0.20", nil), true},
		{"labelled a control plane", node("cp-1", "10.77.0.10", func(n *kubeclient.Node) { n.ControlPlane = true }), false},
		{"a control plane kubeadm has not labelled yet", node("cp-2", "10.77.0.11", nil), false},
		{"a control plane's address as an external one", node("cp-2", "10.0.0.5", func(n *kubeclient.Node) {
			n.Addresses = append(n.Addresses, kubeclient.NodeAddress{Type: "ExternalIP", Address: "10.77.0.11"})
		}), false},
		{"a control plane's address as a host name only", node("w-2", "10.77.0.21", func(n *kubeclient.Node) {
			n.Addresses = append(n.Addresses, kubeclient.NodeAddress{Type: "Hostname", Address: "10.77.0.10"})
		}), true},
		{"no address yet", kubeclient.Node{Name: "w-3"}, false},
		{"an address that is not one", node("w-4", "not-an-ip", nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.worker, IsWorker(tc.node, controlPlanes))
		})
	}
}

// fakeAPI lists nodes and records labels.
type fakeAPI struct {
	nodes    []kubeclient.Node
	listErr  error
	failOn   string
	labelled []string
}

func (f *fakeAPI) Nodes(context.Context) ([]kubeclient.Node, error) { return f.nodes, f.listErr }

func (f *fakeAPI) LabelNode(_ context.Context, name string, labels map[string]string) error {
	if name == f.failOn {
		return fmt.Errorf("label node %s: %w", name, kubeclient.ErrNotFound)
	}
	f.labelled = append(f.labelled, fmt.Sprint(name, " ", labels))
	return nil
}

func labeller(api API) *Labeller {
	return &Labeller{API: api, ControlPlanes: controlPlanes, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// A pass labels the workers that lack the label and nothing else; a node
// that cannot be labelled does not stop the others.
func TestPass(t *testing.T) {
	api := &fakeAPI{nodes: []kubeclient.Node{
		node("cp-1", "10.77.0.10", func(n *kubeclient.Node) { n.ControlPlane = true }),
		node("cp-2", "10.77.0.11", nil),
		node("w-1", "10.77.0.20", nil),
		node("w-2", "10.77.0.21", func(n *kubeclient.Node) { n.Worker = true }),
		node("gone", "10.77.0.22", nil),
		node("w-3", "10.77.0.23", nil),
	}, failOn: "gone"}
	got, err := labeller(api).Pass(context.Background())
	require.ErrorIs(t, err, kubeclient.ErrNotFound)
	assert.ErrorContains(t, err, "label workers: label node gone")
	assert.Equal(t, []string{"w-1", "w-3"}, got)
	assert.Equal(t, []string{"w-1 map[node-role.kubernetes.io/worker:]", "w-3 map[node-role.kubernetes.io/worker:]"}, api.labelled)

	api = &fakeAPI{listErr: errors.New("connection refused")}
	_, err = labeller(api).Pass(context.Background())
	assert.ErrorContains(t, err, "label workers: connection refused")
	assert.Empty(t, api.labelled)
}
