package kubeadmflow

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

const (
	// stepStaleNode waits out a Ready Node of the joiner's name.
	stepStaleNode = "wait for an old Node of this name"
	// JoinKubeconfig is the joiner's own kubeconfig with its bootstrap
	// token (in /run: never on a disk), for what it asks before it has a
	// kubelet credential.
	JoinKubeconfig = "/run/terrarium/join.kubeconfig"
	// staleNodeWait bounds the wait: the node lifecycle controller marks a
	// silent node's Ready condition Unknown after its grace period (50 s
	// by default) from when it first sees it.
	staleNodeWait = 4 * time.Minute
)

// joinKubeconfig is a kubeconfig for the node's bootstrap token, at the
// node's balanced API endpoint: kubeadm lets the token's group get Nodes.
func joinKubeconfig(c *machineconfig.Cluster) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: ` + c.Name + `
  cluster:
    server: https://` + c.APIEndpoint() + `
    certificate-authority-data: ` + base64.StdEncoding.EncodeToString([]byte(c.CACert)) + `
contexts:
- name: join
  context: {cluster: ` + c.Name + `, user: tls-bootstrap-token-user}
current-context: join
users:
- name: tls-bootstrap-token-user
  user:
    token: ` + c.Token + `
`)
}

// waitForStaleNode waits, before a joiner's kubelet starts, while a Node
// of its name is Ready in the cluster. kubeadm refuses to join a name
// whose Node is Ready; in a cluster restored from a backup, the Node of
// the machine this one replaces is Ready in the snapshot until the
// restored control plane notices its kubelet is gone. Another machine that
// runs under this name stays Ready: the step then fails, naming the fix.
func waitForStaleNode(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	return withJoinClient(h, c.Cluster, func(api APIClient) error { return staleNodeGone(ctx, h, c, api) })
}

// withJoinClient calls fn with a client of the API as the node's bootstrap
// token, through JoinKubeconfig, which it removes after: the token has no
// use beyond the step.
func withJoinClient(h *Flow, cl *machineconfig.Cluster, fn func(api APIClient) error) error {
	if _, err := h.WriteIfChanged(JoinKubeconfig, joinKubeconfig(cl), 0o600); err != nil {
		return err
	}
	defer func() { _ = os.Remove(h.Path(JoinKubeconfig)) }() // under /run: gone at the next boot if not now
	api, err := h.API(JoinKubeconfig)
	if err != nil {
		return err
	}
	return fn(api)
}

// staleNodeGone is waitForStaleNode's wait, asking api.
func staleNodeGone(ctx context.Context, h *Flow, c *machineconfig.Config, api APIClient) error {
	deadline := h.Now().Add(staleNodeWait)
	for polls := 0; ; polls++ {
		n, err := api.Node(ctx, c.Hostname)
		switch {
		case errors.Is(err, kubeclient.ErrNotFound):
			return nil
		case err == nil && !n.Ready:
			if polls > 0 {
				h.Report.Report(stepStaleNode, step.Gone, "the old Node "+c.Hostname+" is no longer Ready; joining under its name")
			}
			return nil
		case err != nil:
			// kubelet-start checks again (kubeadm's on a control
			// plane, kubeletStart on a worker); this wait only spares
			// a joiner its failures. Unanswered, kubelet-start decides.
			h.Report.Report(stepStaleNode, step.Skipped, err.Error())
			return nil
		case polls == 0:
			h.Report.Report(stepStaleNode, step.Waiting, "a Node named "+c.Hostname+" is Ready in the cluster: the record of the machine this one replaces (a restored cluster marks it not Ready within minutes), or another machine with this name")
		}
		if h.Now().After(deadline) {
			return fmt.Errorf("a Node named %s has stayed Ready for %s: another machine runs under this name; give this node another hostname, or, if that machine is gone for good, delete its Node (kubectl delete node %s)", c.Hostname, staleNodeWait, c.Hostname)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.Timing.APIPoll):
		}
	}
}
