package kubeclient

import (
	"context"
	"fmt"
	"net/url"
	"time"
)

// Lease is what the client reads and writes of a coordination.k8s.io/v1
// Lease: enough for a lock (pkg/node/kube/leaselock).
type Lease struct {
	Namespace, Name string
	// ResourceVersion is the version read; an update with it fails with
	// ErrConflict when the Lease changed since.
	ResourceVersion string
	Holder          string
	DurationSeconds int
	AcquireTime     time.Time
	RenewTime       time.Time
	Transitions     int
}

// microTime is the API's MicroTime format.
const microTime = "2006-01-02T15:04:05.000000Z07:00"

type leaseJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion,omitempty"`
	} `json:"metadata"`
	Spec struct {
		HolderIdentity       *string `json:"holderIdentity,omitempty"`
		LeaseDurationSeconds int     `json:"leaseDurationSeconds,omitempty"`
		AcquireTime          string  `json:"acquireTime,omitempty"`
		RenewTime            string  `json:"renewTime,omitempty"`
		LeaseTransitions     int     `json:"leaseTransitions,omitempty"`
	} `json:"spec"`
}

func (l Lease) json() leaseJSON {
	var j leaseJSON
	j.APIVersion, j.Kind = "coordination.k8s.io/v1", "Lease"
	j.Metadata.Name, j.Metadata.Namespace, j.Metadata.ResourceVersion = l.Name, l.Namespace, l.ResourceVersion
	holder := l.Holder
	j.Spec.HolderIdentity = &holder
	j.Spec.LeaseDurationSeconds, j.Spec.LeaseTransitions = l.DurationSeconds, l.Transitions
	if !l.AcquireTime.IsZero() {
		j.Spec.AcquireTime = l.AcquireTime.UTC().Format(microTime)
	}
	if !l.RenewTime.IsZero() {
		j.Spec.RenewTime = l.RenewTime.UTC().Format(microTime)
	}
	return j
}

func (j leaseJSON) lease() Lease {
	l := Lease{Namespace: j.Metadata.Namespace, Name: j.Metadata.Name, ResourceVersion: j.Metadata.ResourceVersion,
		DurationSeconds: j.Spec.LeaseDurationSeconds, Transitions: j.Spec.LeaseTransitions}
	if j.Spec.HolderIdentity != nil {
		l.Holder = *j.Spec.HolderIdentity
	}
	// The API writes MicroTime; a Lease written by another client may
	// carry plain RFC 3339. Times are informative only: the lock judges
	// expiry by its own clock (see pkg/node/kube/leaselock).
	l.AcquireTime, l.RenewTime = parseTime(j.Spec.AcquireTime), parseTime(j.Spec.RenewTime)
	return l
}

// parseTime reads an RFC 3339 time (MicroTime included); zero if absent
// or malformed.
func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func leasesPath(namespace string) string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/leases"
}

// Lease reads one Lease; ErrNotFound when there is none.
func (c *Client) Lease(ctx context.Context, namespace, name string) (Lease, error) {
	var j leaseJSON
	if err := c.get(ctx, leasesPath(namespace)+"/"+url.PathEscape(name), &j); err != nil {
		return Lease{}, err
	}
	return j.lease(), nil
}

// CreateLease creates a Lease; ErrConflict when it already exists.
func (c *Client) CreateLease(ctx context.Context, l Lease) (Lease, error) {
	var out leaseJSON
	in := l.json()
	in.Metadata.ResourceVersion = ""
	if err := c.do(ctx, "POST", leasesPath(l.Namespace), in, &out); err != nil {
		return Lease{}, fmt.Errorf("create lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return out.lease(), nil
}

// UpdateLease replaces a Lease read at l.ResourceVersion; ErrConflict when
// it changed since.
func (c *Client) UpdateLease(ctx context.Context, l Lease) (Lease, error) {
	if l.ResourceVersion == "" {
		return Lease{}, fmt.Errorf("update lease %s/%s: no resourceVersion: read it first", l.Namespace, l.Name)
	}
	var out leaseJSON
	if err := c.do(ctx, "PUT", leasesPath(l.Namespace)+"/"+url.PathEscape(l.Name), l.json(), &out); err != nil {
		return Lease{}, fmt.Errorf("update lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return out.lease(), nil
}
