package firstboot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdmember"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/ops/nodebackup"
)

// nodeDeleter is the API client's part that deletes a Node (the admin's
// client has it).
type nodeDeleter interface {
	DeleteNode(ctx context.Context, name string) error
}

var _ nodeDeleter = (*kubeclient.Client)(nil)

// RemovedNode is what RemoveNode removed.
type RemovedNode struct {
	Name string
	// Member is the etcd member removed (zero for a worker, which has
	// none).
	Member etcdmember.Member
	// NodeDeleted says its Node object was deleted; NodeErr is why not,
	// when it was not (the replacement's join waits the Node out).
	NodeDeleted bool
	NodeErr     error
}

func (r RemovedNode) String() string {
	var done []string
	if r.Member.ID != 0 {
		done = append(done, fmt.Sprintf("etcd member %s (%s)", r.Name, r.Member.HexID()))
	}
	if r.NodeDeleted {
		done = append(done, "Node "+r.Name)
	}
	s := "removed " + strings.Join(done, " and ")
	if r.NodeErr != nil {
		s += fmt.Sprintf("; its Node was not deleted (%v): a replacement waits until it is not Ready", r.NodeErr)
	}
	return s + fmt.Sprintf(". A new machine booted with %s's config disk joins in its place.", r.Name)
}

// RemoveNode forgets a node that is gone for good, on a control plane of
// its cluster: `firstboot remove-node NAME`. A lost control plane's etcd
// member is removed (only if it does not answer and the others keep a
// quorum: etcdmember.Remove), then its Node object is deleted. Nothing is
// changed when the member cannot be removed.
func RemoveNode(ctx context.Context, o Options, name string) (RemovedNode, error) {
	r, cfg, err := openEnrolled(o, "it is in no cluster")
	if err != nil {
		return RemovedNode{}, err
	}
	if !nodebackup.IsEtcdMember(r.o.Host, cfg) {
		return RemovedNode{}, errors.New("this node runs no etcd member: remove a node from a control plane of the cluster")
	}
	res := RemovedNode{Name: name}
	switch res.Member, err = etcdmember.Remove(ctx, o.Host, name, cfg.Hostname); {
	case errors.Is(err, etcdmember.ErrNoMember): // a worker: only its Node
	case err != nil:
		return RemovedNode{}, err
	default:
		r.say("remove-node: removed etcd member %s (%s)", name, res.Member.HexID())
	}
	api, err := o.Cluster.API(kubeadmflow.AdminKubeconfig)
	if err != nil {
		res.NodeErr = err
		return res, nil
	}
	d, ok := api.(nodeDeleter)
	if !ok {
		res.NodeErr = errors.New("this API client cannot delete nodes")
		return res, nil
	}
	switch err := d.DeleteNode(ctx, name); {
	case errors.Is(err, kubeclient.ErrNotFound) && res.Member.ID == 0:
		return RemovedNode{}, fmt.Errorf("%s is neither an etcd member nor a Node of this cluster", name)
	case errors.Is(err, kubeclient.ErrNotFound):
	case err != nil:
		res.NodeErr = err
	default:
		res.NodeDeleted = true
		r.say("remove-node: deleted Node %s", name)
	}
	return res, nil
}
