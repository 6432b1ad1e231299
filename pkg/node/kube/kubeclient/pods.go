package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// Pod is what the client reads of a Pod: enough to drain a node.
type Pod struct {
	Namespace, Name, UID string
	// Phase is the pod's phase (Pending, Running, Succeeded, Failed).
	Phase string
	// DaemonSet: a DaemonSet owns the pod; its controller would put it
	// back on the node at once, so a drain leaves it.
	DaemonSet bool
	// Mirror: the API's copy of a static pod, which the kubelet runs from
	// a file; evicting it does nothing.
	Mirror bool
	// Deleting: the pod is being deleted already.
	Deleting bool
	// Controlled: a controller (a ReplicaSet, a StatefulSet, a Job...)
	// owns the pod and puts an evicted one back elsewhere.
	Controlled bool
	// Annotations are the pod's annotations (a mirror pod's are its
	// static pod's).
	Annotations map[string]string
	// Ready: the pod's Ready condition is True.
	Ready bool
}

// mirrorAnnotation marks the API's copy of a static pod.
const mirrorAnnotation = "kubernetes.io/config.mirror"

type podJSON struct {
	Metadata struct {
		Namespace         string            `json:"namespace"`
		Name              string            `json:"name"`
		UID               string            `json:"uid"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind       string `json:"kind"`
			Controller bool   `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

func (j podJSON) pod() Pod {
	p := Pod{Namespace: j.Metadata.Namespace, Name: j.Metadata.Name, UID: j.Metadata.UID, Phase: j.Status.Phase,
		Deleting: j.Metadata.DeletionTimestamp != "", Annotations: j.Metadata.Annotations}
	for _, c := range j.Status.Conditions {
		if c.Type == "Ready" {
			p.Ready = c.Status == "True"
		}
	}
	_, p.Mirror = j.Metadata.Annotations[mirrorAnnotation]
	for _, o := range j.Metadata.OwnerReferences {
		if o.Controller {
			p.Controlled = true
			p.DaemonSet = p.DaemonSet || o.Kind == "DaemonSet"
		}
	}
	return p
}

// Pod reads one pod; ErrNotFound when there is none.
func (c *Client) Pod(ctx context.Context, namespace, name string) (Pod, error) {
	var j podJSON
	if err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), &j); err != nil {
		return Pod{}, fmt.Errorf("read pod %s/%s: %w", namespace, name, err)
	}
	return j.pod(), nil
}

// PodsOn lists the pods bound to a node, in every namespace.
func (c *Client) PodsOn(ctx context.Context, node string) ([]Pod, error) {
	var list struct {
		Items []podJSON `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}}
	if err := c.send(ctx, request{method: http.MethodGet, path: "/api/v1/pods", query: q}, &list); err != nil {
		return nil, fmt.Errorf("list the pods on node %s: %w", node, err)
	}
	pods := make([]Pod, 0, len(list.Items))
	for _, j := range list.Items {
		pods = append(pods, j.pod())
	}
	return pods, nil
}

// Evict asks the API to evict a pod through its eviction subresource,
// which honours PodDisruptionBudgets: ErrTooManyRequests when a budget
// does not allow it now (try again later), ErrNotFound when the pod is
// gone already. A kubelet's own credentials may evict the pods bound to
// its node (the NodeRestriction admission plugin).
func (c *Client) Evict(ctx context.Context, p Pod) error {
	eviction := map[string]any{
		"apiVersion": "policy/v1",
		"kind":       "Eviction",
		"metadata":   map[string]any{"name": p.Name, "namespace": p.Namespace},
	}
	if p.UID != "" {
		// Evict this pod, not a successor of the same name.
		eviction["deleteOptions"] = map[string]any{"preconditions": map[string]any{"uid": p.UID}}
	}
	path := "/api/v1/namespaces/" + url.PathEscape(p.Namespace) + "/pods/" + url.PathEscape(p.Name) + "/eviction"
	if err := c.send(ctx, request{method: http.MethodPost, path: path, body: eviction}, nil); err != nil {
		return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
