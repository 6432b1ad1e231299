package kubeadmflow

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/csrsigner"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/noderole"
)

// admitEvery is the pause between two admission passes (admitNodes):
// a serving certificate request waits for a pass at most this long (its
// kubelet waits 15 minutes for an answer before asking again; a renewal
// starts months before the certificate expires), and a pass costs the
// API server two list requests and its audit log two lines.
const admitEvery = time.Minute

// AdmitNodes is a control plane's admission of the cluster's nodes, until
// ctx ends: each kubelet's certificate requests decided (the serving
// ones, which no other part of the cluster approves, approved for the
// node's own names and addresses only: csrsigner) and each worker
// labelled node-role.kubernetes.io/worker (which its kubelet may not set
// itself: noderole), a pass every admitEvery.
//
// It must run for as long as the cluster does, on at least one control
// plane: a kubelet asks for its serving certificate when it first joins
// and again before the certificate expires (within a year), and until it
// has one it serves nothing (the API server's logs, exec and
// port-forward to it fail). The init node starts it as soon as the
// cluster is joinable (applyKubernetes), for as long as firstboot runs;
// firstboot starts it on every control plane once its phases are done.
// A call while another runs on this flow returns at once.
func (f *Flow) AdmitNodes(ctx context.Context, c *machineconfig.Config) error {
	if f.Admission == nil || c.Cluster == nil || !c.Cluster.IsControlPlane() {
		return nil
	}
	if !f.admitting.CompareAndSwap(false, true) {
		return nil
	}
	defer f.admitting.Store(false)
	return f.Admission(ctx, AdminKubeconfig, KubernetesPKIDir, c.Cluster.ControlPlanes)
}

// admitNodes is Real's Admission: a pass of the signer and of the
// labeller every admitEvery until ctx ends, as the admin of kubeconfig.
// A pass that fails is logged and the next one tries again: a control
// plane restarting, an API server out of reach.
func admitNodes(ctx context.Context, h *host.Host, client func(string) (*kubeclient.Client, error), kubeconfig, pkiDir string, controlPlanes []string) error {
	a := &admission{h: h, client: client, kubeconfig: kubeconfig, pkiDir: pkiDir, controlPlanes: controlPlanes}
	defer a.close()
	for {
		if err := a.pass(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("node admission", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(admitEvery):
		}
	}
}

// admission is admitNodes' state across passes: its client, signer and
// labeller, made on the first pass that can (the admin's credential and
// the CA are there once the node has joined). The signer is kept so that
// it logs each refusal once.
type admission struct {
	h                  *host.Host
	client             func(string) (*kubeclient.Client, error)
	kubeconfig, pkiDir string
	controlPlanes      []string

	api     *kubeclient.Client
	signer  *csrsigner.Signer
	workers *noderole.Labeller
}

// pass decides the pending certificate requests and labels the workers,
// once.
func (a *admission) pass(ctx context.Context) error {
	if a.api == nil {
		c, err := a.client(a.kubeconfig)
		if err != nil {
			return err
		}
		a.api = c
	}
	if a.signer == nil {
		s, err := newSigner(a.h, a.api, a.pkiDir)
		if err != nil {
			return err
		}
		a.signer = s
		a.workers = &noderole.Labeller{API: a.api, ControlPlanes: a.controlPlanes, Log: slog.Default()}
	}
	errSign := a.signer.Pass(ctx)
	_, errLabel := a.workers.Pass(ctx)
	return errors.Join(errSign, errLabel)
}

func (a *admission) close() {
	if a.api != nil {
		a.api.CloseIdleConnections()
	}
}
