package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// API reads and writes ConfigMaps (pkg/node/kube/kubeclient.Client).
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
	if r.Instructions, err = decodeInstructions(m.Data[instructionsKey]); err != nil {
		return Record{}, m, err
	}
	return r, m, nil
}

// decodeInstructions reads the rollout's signed instructions; nil when
// there are none.
func decodeInstructions(data string) (*Instructions, error) {
	if data == "" {
		return nil, nil
	}
	if len(data) > maxRecord {
		return nil, fmt.Errorf("the rollout's instructions (configmap %s/%s key %s) are %d bytes, more than %d",
			Namespace, ConfigMapName, instructionsKey, len(data), maxRecord)
	}
	var in Instructions
	if err := json.Unmarshal([]byte(data), &in); err != nil {
		return nil, fmt.Errorf("the rollout's instructions (configmap %s/%s key %s) are not readable: %w",
			Namespace, ConfigMapName, instructionsKey, err)
	}
	return &in, nil
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

// ErrUnchanged is what Update's change returns to leave the record
// unwritten without an error: there was nothing to change.
var ErrUnchanged = errors.New("nothing to change in the upgrade record")

// Update changes the cluster's record with change and writes it back,
// reading it again and redoing change when another writer wrote it
// meanwhile. change's error leaves the record as it was and is returned.
// Only the cluster's admin may write the record (a control plane with its
// admin credential); a node's credential is refused.
func Update(ctx context.Context, api API, change func(*Record) error) (Record, error) {
	for attempt := 0; ; attempt++ {
		r, m, err := load(ctx, api)
		if err != nil {
			return Record{}, err
		}
		if err := change(&r); errors.Is(err, ErrUnchanged) {
			return r, nil
		} else if err != nil {
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
		if r.Instructions == nil {
			delete(m.Data, instructionsKey)
		} else {
			b, err := json.Marshal(r.Instructions)
			if err != nil {
				return r, fmt.Errorf("encode the rollout's instructions: %w", err)
			}
			m.Data[instructionsKey] = string(b)
		}
		if n := len(m.Data[dataKey]) + len(m.Data[instructionsKey]); n > maxRecord {
			return r, fmt.Errorf("the cluster's upgrade record would be %d bytes, more than %d", n, maxRecord)
		}
		if m.ResourceVersion == "" {
			_, err = api.CreateConfigMap(ctx, m)
		} else {
			_, err = api.UpdateConfigMap(ctx, m)
		}
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, kubeclient.ErrConflict) && attempt+1 < maxAttempts:
			continue // another writer wrote it: decide again on what it wrote
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
