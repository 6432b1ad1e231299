package leaselock

import (
	"context"
	"strconv"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// ConfigMapAPI reads and writes ConfigMaps (pkg/node/kube/kubeclient.Client).
type ConfigMapAPI interface {
	ConfigMap(ctx context.Context, namespace, name string) (kubeclient.ConfigMap, error)
	CreateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error)
	UpdateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error)
}

// The keys of a lock kept in a ConfigMap: a Lease's spec, field by field.
const (
	keyHolder      = "holderIdentity"
	keyDuration    = "leaseDurationSeconds"
	keyAcquire     = "acquireTime"
	keyRenew       = "renewTime"
	keyTransitions = "leaseTransitions"
)

// InConfigMap keeps the lock in a ConfigMap of the same name instead of a
// Lease, for locks taken with a kubelet's credentials: the NodeRestriction
// admission plugin lets a node (system:node:NAME) write no Lease but its
// own heartbeat in kube-node-lease, whatever RBAC grants ("can only access
// leases in the kube-node-lease system namespace"), while a ConfigMap is
// governed by RBAC alone. The lock works the same: optimistic concurrency
// on the ConfigMap's resourceVersion, expiry judged on the reader's clock.
func InConfigMap(api ConfigMapAPI) Store { return configMapStore{api} }

type configMapStore struct{ api ConfigMapAPI }

func (s configMapStore) Lease(ctx context.Context, namespace, name string) (kubeclient.Lease, error) {
	m, err := s.api.ConfigMap(ctx, namespace, name)
	if err != nil {
		return kubeclient.Lease{}, err
	}
	return leaseOf(m), nil
}

func (s configMapStore) CreateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	m, err := s.api.CreateConfigMap(ctx, configMapOf(l))
	if err != nil {
		return kubeclient.Lease{}, err
	}
	return leaseOf(m), nil
}

func (s configMapStore) UpdateLease(ctx context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	m, err := s.api.UpdateConfigMap(ctx, configMapOf(l))
	if err != nil {
		return kubeclient.Lease{}, err
	}
	return leaseOf(m), nil
}

func configMapOf(l kubeclient.Lease) kubeclient.ConfigMap {
	d := map[string]string{
		keyHolder:      l.Holder,
		keyDuration:    strconv.Itoa(l.DurationSeconds),
		keyTransitions: strconv.Itoa(l.Transitions),
	}
	if !l.AcquireTime.IsZero() {
		d[keyAcquire] = l.AcquireTime.UTC().Format(time.RFC3339Nano)
	}
	if !l.RenewTime.IsZero() {
		d[keyRenew] = l.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return kubeclient.ConfigMap{Namespace: l.Namespace, Name: l.Name, ResourceVersion: l.ResourceVersion, Data: d}
}

// leaseOf reads a lock's ConfigMap. A value that does not parse reads as
// zero (an empty ConfigMap is a free lock): the times are informative and
// the duration falls back to the lock's own.
func leaseOf(m kubeclient.ConfigMap) kubeclient.Lease {
	l := kubeclient.Lease{Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion, Holder: m.Data[keyHolder]}
	l.DurationSeconds, _ = strconv.Atoi(m.Data[keyDuration])
	l.Transitions, _ = strconv.Atoi(m.Data[keyTransitions])
	l.AcquireTime, _ = time.Parse(time.RFC3339Nano, m.Data[keyAcquire])
	l.RenewTime, _ = time.Parse(time.RFC3339Nano, m.Data[keyRenew])
	return l
}
