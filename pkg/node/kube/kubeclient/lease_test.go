package kubeclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// leaseAPI serves Leases in kube-system as kube-apiserver does: POST
// creates (409 AlreadyExists if there), PUT replaces at the version read
// (409 Conflict if stale), every write bumps resourceVersion. It checks
// the requests' shape against what the API server requires.
func leaseAPI(t *testing.T, mux *http.ServeMux) {
	var mu sync.Mutex
	stored := map[string]map[string]any{}
	version := 0
	const base = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
	decode := func(w http.ResponseWriter, r *http.Request) map[string]any {
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: Content-Type %q", r.Method, r.URL, r.Header.Get("Content-Type"))
		}
		var obj map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return nil
		}
		if obj["apiVersion"] != "coordination.k8s.io/v1" || obj["kind"] != "Lease" {
			t.Errorf("%s %s: apiVersion/kind %v/%v", r.Method, r.URL, obj["apiVersion"], obj["kind"])
		}
		spec, _ := obj["spec"].(map[string]any)
		for _, k := range []string{"acquireTime", "renewTime"} {
			if v, ok := spec[k].(string); ok {
				if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", v); err != nil {
					t.Errorf("%s: %q is not a MicroTime", k, v)
				}
			}
		}
		return obj
	}
	save := func(w http.ResponseWriter, name string, obj map[string]any, code int) {
		version++
		obj["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(version)
		stored[name] = obj
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(obj)
	}
	mux.HandleFunc("GET "+base+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		obj, ok := stored[r.PathValue("name")]
		if !ok {
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(obj)
	})
	mux.HandleFunc("POST "+base, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		obj := decode(w, r)
		if obj == nil {
			return
		}
		name := obj["metadata"].(map[string]any)["name"].(string)
		if _, ok := stored[name]; ok {
			http.Error(w, `{"kind":"Status","reason":"AlreadyExists"}`, http.StatusConflict)
			return
		}
		save(w, name, obj, http.StatusCreated)
	})
	mux.HandleFunc("PUT "+base+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		obj := decode(w, r)
		if obj == nil {
			return
		}
		name := r.PathValue("name")
		cur, ok := stored[name]
		if !ok {
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
			return
		}
		if obj["metadata"].(map[string]any)["resourceVersion"] != cur["metadata"].(map[string]any)["resourceVersion"] {
			http.Error(w, `{"kind":"Status","reason":"Conflict","message":"the object has been modified"}`, http.StatusConflict)
			return
		}
		save(w, name, obj, http.StatusOK)
	})
}

func TestLeaseCreateReadUpdate(t *testing.T) {
	p := newPKI(t, "kubernetes-admin")
	mux := http.NewServeMux()
	leaseAPI(t, mux)
	srv := tlsServer(t, p, mux, nil)
	c, err := New([]byte(adminConf(srv.URL, p)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Lease(ctx, "kube-system", "etcd-join"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing lease: err %v, want ErrNotFound", err)
	}
	now := time.Date(2026, 11, 24, 12, 0, 0, 123456000, time.UTC)
	created, err := c.CreateLease(ctx, Lease{Namespace: "kube-system", Name: "etcd-join", Holder: "cp-2",
		DurationSeconds: 180, AcquireTime: now, RenewTime: now})
	if err != nil {
		t.Fatal(err)
	}
	if created.ResourceVersion == "" || created.Holder != "cp-2" || !created.RenewTime.Equal(now) {
		t.Fatalf("created %+v", created)
	}
	if _, err := c.CreateLease(ctx, Lease{Namespace: "kube-system", Name: "etcd-join", Holder: "cp-3"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("second create: err %v, want ErrConflict", err)
	}
	// Releasing writes an empty holder, which must read back as empty.
	released := created
	released.Holder = ""
	if _, err := c.UpdateLease(ctx, released); err != nil {
		t.Fatal(err)
	}
	// The version read before the release is stale now.
	stale := created
	stale.Holder = "cp-3"
	if _, err := c.UpdateLease(ctx, stale); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale update: err %v, want ErrConflict", err)
	} else if !strings.Contains(err.Error(), "the object has been modified") {
		t.Errorf("error %q does not carry the API's message", err)
	}
	got, err := c.Lease(ctx, "kube-system", "etcd-join")
	if err != nil {
		t.Fatal(err)
	}
	if got.Holder != "" || got.DurationSeconds != 180 || got.ResourceVersion == created.ResourceVersion {
		t.Errorf("read back %+v", got)
	}
	if _, err := c.UpdateLease(ctx, Lease{Namespace: "kube-system", Name: "etcd-join"}); err == nil {
		t.Error("an update without a resourceVersion was sent")
	}
}
