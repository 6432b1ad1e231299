package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// APIServerVersions asks each control plane's API server (endpoints,
// host:port, every one of the cluster's) for the Kubernetes version it
// runs, with the kubelet's credentials. A node that has not joined its
// cluster yet (no kubelet kubeconfig) has none to ask: nil. The versions of
// the servers that answered come back with an error naming each one that
// did not.
func (f *Flow) APIServerVersions(ctx context.Context, endpoints []string) ([]string, error) {
	if _, err := os.Stat(f.Host.Path(KubeletKubeconfig)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var (
		versions []string
		errs     []error
	)
	for _, ep := range endpoints {
		v, err := f.Deps.APIVersion(ctx, KubeletKubeconfig, ep)
		if err != nil {
			errs = append(errs, fmt.Errorf("the API server at %s: %w", ep, err))
			continue
		}
		versions = append(versions, v)
	}
	return versions, errors.Join(errs...)
}
