package rollout

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// DrainAPI cordons a node and evicts its pods
// (pkg/node/kube/kubeclient.Client).
type DrainAPI interface {
	Cordon(ctx context.Context, name string, unschedulable bool) error
	PodsOn(ctx context.Context, node string) ([]kubeclient.Pod, error)
	Evict(ctx context.Context, p kubeclient.Pod) error
}

// DrainOptions tune Drain.
type DrainOptions struct {
	// Timeout bounds the whole drain (default 5 minutes): a budget that
	// never allows an eviction stops the drain, and with it the rollout.
	Timeout time.Duration
	// Poll is how often the pods are looked at again (default 2 s).
	Poll time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Report hears progress lines.
	Report func(line string)
}

func (o *DrainOptions) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Report == nil {
		o.Report = func(string) {}
	}
}

// ErrDrainTimeout means pods were still on the node when the drain's time ran
// out.
var ErrDrainTimeout = errors.New("pods are still on the node")

// Drain cordons node and evicts its pods as kubectl drain
// --ignore-daemonsets does: through the eviction API, so that
// PodDisruptionBudgets hold (an eviction a budget refuses is tried again
// every poll), leaving DaemonSet pods and static pods, which would come
// straight back, and finished pods. It returns once every evicted pod is
// gone. The node stays cordoned, also when the drain fails: Uncordon
// undoes it.
func Drain(ctx context.Context, api DrainAPI, node string, o DrainOptions) error {
	o.defaults()
	if err := api.Cordon(ctx, node, true); err != nil {
		return fmt.Errorf("drain node %s: %w", node, err)
	}
	deadline := o.Now().Add(o.Timeout)
	reported := ""
	bare := map[string]bool{}
	for {
		left, why, err := evictRound(ctx, api, node, func(p kubeclient.Pod) {
			if !bare[key(p)] {
				bare[key(p)] = true
				o.Report(fmt.Sprintf("draining node %s: evicting %s, which no controller puts back elsewhere", node, key(p)))
			}
		})
		var line string
		switch {
		case err != nil:
			// A loaded API server times a list out now and then.
			line = fmt.Sprintf("draining node %s: listing its pods: %v", node, err)
		case len(left) == 0:
			o.Report(fmt.Sprintf("node %s drained", node))
			return nil
		default:
			line = fmt.Sprintf("draining node %s: waiting for %s", node, describe(left, why))
		}
		if line != reported {
			o.Report(line)
			reported = line
		}
		if !o.Now().Before(deadline) {
			if err != nil {
				return fmt.Errorf("drain node %s: after %s, its pods could not be listed: %w", node, o.Timeout, err)
			}
			return fmt.Errorf("drain node %s: after %s, %w: %s", node, o.Timeout, ErrDrainTimeout, describe(left, why))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain node %s: %w", node, ctx.Err())
		case <-time.After(o.Poll):
		}
	}
}

// evictRound asks once to evict every pod that must leave node. It returns
// the pods still there and, for those whose eviction was refused, why.
// bare hears of each pod no controller owns, before it is evicted.
func evictRound(ctx context.Context, api DrainAPI, node string, bare func(kubeclient.Pod)) ([]kubeclient.Pod, map[string]string, error) {
	pods, err := api.PodsOn(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	var left []kubeclient.Pod
	why := map[string]string{}
	for _, p := range pods {
		switch {
		case p.DaemonSet, p.Mirror, p.Phase == "Succeeded", p.Phase == "Failed":
			continue
		case p.Deleting:
			left = append(left, p) // evicted: wait until it is gone
			continue
		}
		if !p.Controlled {
			bare(p)
		}
		err := api.Evict(ctx, p)
		switch {
		case err == nil:
			left = append(left, p)
		case errors.Is(err, kubeclient.ErrNotFound):
		case errors.Is(err, kubeclient.ErrTooManyRequests):
			left = append(left, p)
			why[key(p)] = "its disruption budget allows no eviction now"
		default:
			// A loaded API server times out now and then: try again next
			// round, until the drain's time runs out.
			left = append(left, p)
			why[key(p)] = err.Error()
		}
	}
	return left, why, nil
}

func key(p kubeclient.Pod) string { return p.Namespace + "/" + p.Name }

// describe names the pods left, with why where known.
func describe(left []kubeclient.Pod, why map[string]string) string {
	names := make([]string, 0, len(left))
	for _, p := range left {
		s := key(p)
		if w := why[s]; w != "" {
			s += " (" + w + ")"
		}
		names = append(names, s)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Uncordon makes node schedulable again.
func Uncordon(ctx context.Context, api DrainAPI, node string) error {
	return api.Cordon(ctx, node, false)
}
