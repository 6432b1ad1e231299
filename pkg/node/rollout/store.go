package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/node/kubeclient"
)

// API reads and writes ConfigMaps (pkg/node/kubeclient.Client).
type API interface {
	ConfigMap(ctx context.Context, namespace, name string) (kubeclient.ConfigMap, error)
	CreateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error)
	UpdateConfigMap(ctx context.Context, m kubeclient.ConfigMap) (kubeclient.ConfigMap, error)
}

// maxRecord bounds the record: a ConfigMap holds at most 1 MiB.
const maxRecord = 512 << 10

// Load reads the cluster's record; an empty one when there is none yet.
func Load(ctx context.Context, api API) (Record, error) {
	r, _, err := load(ctx, api)
	return r, err
}

// load reads the record and the ConfigMap it came from (zero when none).
func load(ctx context.Context, api API) (Record, kubeclient.ConfigMap, error) {
	m, err := api.ConfigMap(ctx, Namespace, ConfigMapName)
	switch {
	case errors.Is(err, kubeclient.ErrNotFound):
		return Record{}, kubeclient.ConfigMap{}, nil
	case err != nil:
		return Record{}, kubeclient.ConfigMap{}, fmt.Errorf("read the cluster's upgrade record: %w", err)
	}
	r, err := decode(m.Data[dataKey])
	if err != nil {
		return Record{}, m, err
	}
	return r, m, nil
}

// decode reads the JSON record; an absent one is empty.
func decode(data string) (Record, error) {
	var r Record
	if data == "" {
		return r, nil
	}
	if len(data) > maxRecord {
		return r, fmt.Errorf("the cluster's upgrade record (configmap %s/%s key %s) is %d bytes, more than %d: clear that key to start afresh (kubectl -n kube-system edit configmap terrarium-upgrades)",
			Namespace, ConfigMapName, dataKey, len(data), maxRecord)
	}
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		return r, fmt.Errorf("the cluster's upgrade record (configmap %s/%s key %s) is not readable: %w (clear that key to start afresh: kubectl -n kube-system edit configmap terrarium-upgrades)",
			Namespace, ConfigMapName, dataKey, err)
	}
	return r, nil
}

// maxAttempts bounds Update's retries on conflicting writers.
const maxAttempts = 8

// Update changes the cluster's record with change and writes it back,
// reading it again and redoing change when another node wrote it
// meanwhile. change's error leaves the record as it was and is returned.
func Update(ctx context.Context, api API, change func(*Record) error) (Record, error) {
	for attempt := 0; ; attempt++ {
		r, m, err := load(ctx, api)
		if err != nil {
			return Record{}, err
		}
		if err := change(&r); err != nil {
			return r, err
		}
		data, err := marshal(r)
		if err != nil {
			return r, fmt.Errorf("encode the cluster's upgrade record: %w", err)
		}
		if len(data) > maxRecord {
			return r, fmt.Errorf("the cluster's upgrade record would be %d bytes, more than %d", len(data), maxRecord)
		}
		m.Namespace, m.Name = Namespace, ConfigMapName
		if m.Data == nil {
			m.Data = map[string]string{}
		}
		m.Data[dataKey] = data
		if m.ResourceVersion == "" {
			_, err = api.CreateConfigMap(ctx, m)
		} else {
			_, err = api.UpdateConfigMap(ctx, m)
		}
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, kubeclient.ErrConflict) && attempt+1 < maxAttempts:
			continue // another node wrote it: decide again on what it wrote
		default:
			return r, fmt.Errorf("write the cluster's upgrade record: %w", err)
		}
	}
}

// marshal is the record's JSON.
func marshal(r Record) (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}
