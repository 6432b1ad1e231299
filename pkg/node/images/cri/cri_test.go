package cri

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtime is a CRI v1 runtime service on a unix socket, answering the
// three calls Check makes the way its fields say.
type runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	notReady      bool
	noConfig      bool
	cgroupfs      bool
	versionDelay  time.Duration
	versionCalled chan struct{}
	containers    []*runtimeapi.Container
	stopped       []string
}

// StopContainer marks the container exited, as containerd does once it
// ends.
func (r *runtime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	for _, c := range r.containers {
		if c.Id == req.ContainerId {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
			r.stopped = append(r.stopped, c.Id)
			return &runtimeapi.StopContainerResponse{}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
}

// ListContainers applies the filter's state and label selector, as
// containerd does.
func (r *runtime) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	var out []*runtimeapi.Container
	for _, c := range r.containers {
		if f.GetState() != nil && c.State != f.GetState().GetState() {
			continue
		}
		match := true
		for k, v := range f.GetLabelSelector() {
			match = match && c.Labels[k] == v
		}
		if match {
			out = append(out, c)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (r *runtime) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	if r.versionCalled != nil {
		close(r.versionCalled)
		r.versionCalled = nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(r.versionDelay):
	}
	return &runtimeapi.VersionResponse{Version: req.Version, RuntimeName: "containerd", RuntimeVersion: "v2.3.7", RuntimeApiVersion: "v1"}, nil
}

func (r *runtime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: !r.notReady, Reason: "NotStarted", Message: "the runtime is starting"},
		{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady", Message: "cni config uninitialized"},
	}}}, nil
}

func (r *runtime) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	if r.noConfig {
		return nil, status.Error(codes.Unimplemented, "unknown method RuntimeConfig")
	}
	d := runtimeapi.CgroupDriver_SYSTEMD
	if r.cgroupfs {
		d = runtimeapi.CgroupDriver_CGROUPFS
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}, nil
}

// images is a CRI image service that holds what it is told to pull, as
// long as its registry (pullable) has it.
type images struct {
	runtimeapi.UnimplementedImageServiceServer
	mu       sync.Mutex
	pullable map[string]bool
	present  map[string]bool
	pulls    []string
}

func (s *images) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.present[req.Image.Image] {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:1", RepoTags: []string{req.Image.Image}}}, nil
}

func (s *images) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := req.Image.Image
	s.pulls = append(s.pulls, ref)
	if !s.pullable[ref] {
		return nil, status.Errorf(codes.NotFound, "failed to resolve reference %q: not found", ref)
	}
	s.present[ref] = true
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:1"}, nil
}

// serve runs r (and is, if not nil) on a fresh unix socket and returns
// its path.
func serve(t *testing.T, r *runtime, is ...*images) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	s := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s, r)
	for _, i := range is {
		runtimeapi.RegisterImageServiceServer(s, i)
	}
	go func() { _ = s.Serve(l) }() // nil once Stop stops it; a failure shows as the client's
	t.Cleanup(s.Stop)
	return sock
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rt         *runtime
		unixURL    bool
		wantDriver string
		wantErr    string
	}{
		{name: "ready", rt: &runtime{}, wantDriver: "systemd"},
		{name: "ready, unix URL", rt: &runtime{cgroupfs: true}, unixURL: true, wantDriver: "cgroupfs"},
		{name: "not ready", rt: &runtime{notReady: true}, wantErr: "is not ready: NotStarted the runtime is starting"},
		{name: "no RuntimeConfig", rt: &runtime{noConfig: true}, wantErr: "does not implement the CRI RuntimeConfig call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := serve(t, tc.rt)
			if tc.unixURL {
				ep = "unix://" + ep
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			info, err := Check(ctx, ep)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr, "Check: want an error containing %q", tc.wantErr)
				assert.ErrorContains(t, err, ep, "Check: want an error naming %s", ep)
				return
			}
			require.NoError(t, err)
			want := Info{RuntimeName: "containerd", RuntimeVersion: "v2.3.7", APIVersion: "v1", CgroupDriver: tc.wantDriver}
			assert.Equal(t, want, info, "Check")
		})
	}
}

// A runtime slower than kubeadm's fixed two seconds passes within the
// caller's longer deadline, and fails with the deadline named when it is
// slower still.
func TestCheckDeadline(t *testing.T) {
	slow := &runtime{versionDelay: 2500 * time.Millisecond}
	ep := serve(t, slow)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Check(ctx, ep)
	require.NoError(t, err, "a runtime answering in 2.5 s within a 10 s deadline")

	slower := &runtime{versionDelay: time.Minute, versionCalled: make(chan struct{})}
	called := slower.versionCalled
	ep = serve(t, slower)
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = Check(ctx, ep)
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "Check = %v, want DeadlineExceeded", err)
	require.ErrorContains(t, err, "CRI v1 version", "Check: want the error asking for the version")
	select {
	case <-called:
	default:
		require.Fail(t, "the runtime was never asked")
	}
}

func TestCheckNoSocket(t *testing.T) {
	ep := filepath.Join(t.TempDir(), "missing.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Check(ctx, ep)
	assert.ErrorContains(t, err, ep, "Check: want an error naming %s", ep)
}

// Pull pulls an absent image once, leaves a present one alone, and names
// the image and the endpoint when the runtime cannot pull it.
func TestPull(t *testing.T) {
	is := &images{pullable: map[string]bool{"registry.k8s.io/pause:3.10.2": true}, present: map[string]bool{"registry.k8s.io/etcd:3.6.8-0": true}}
	ep := serve(t, &runtime{}, is)
	c, ctx := dial(t, ep)
	for _, tc := range []struct {
		ref        string
		wantPulled bool
		wantErr    string
	}{
		{ref: "registry.k8s.io/pause:3.10.2", wantPulled: true},
		{ref: "registry.k8s.io/pause:3.10.2"},
		{ref: "registry.k8s.io/etcd:3.6.8-0"},
		{ref: "registry.k8s.io/kube-proxy:v0.0.0", wantErr: "pull registry.k8s.io/kube-proxy:v0.0.0 through the container runtime at " + ep},
	} {
		pulled, err := c.Pull(ctx, tc.ref)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "Pull(%s)", tc.ref)
			assert.Equal(t, codes.NotFound, status.Code(err), "Pull(%s) = %v, want NotFound", tc.ref, err)
			continue
		}
		if assert.NoError(t, err, "Pull(%s)", tc.ref) {
			assert.Equal(t, tc.wantPulled, pulled, "Pull(%s) pulled", tc.ref)
		}
	}
	assert.Equal(t, []string{"registry.k8s.io/pause:3.10.2", "registry.k8s.io/kube-proxy:v0.0.0"}, is.pulls, "runtime pulled")
}

// Running finds a container by the name the kubelet gave it, and only
// while it runs.
func TestRunning(t *testing.T) {
	container := func(name string, state runtimeapi.ContainerState) *runtimeapi.Container {
		return &runtimeapi.Container{Id: name + "-id", State: state, Labels: map[string]string{containerNameLabel: name}}
	}
	ep := serve(t, &runtime{containers: []*runtimeapi.Container{
		container("kube-proxy", runtimeapi.ContainerState_CONTAINER_RUNNING),
		container("kube-flannel", runtimeapi.ContainerState_CONTAINER_EXITED),
		container("install-cni", runtimeapi.ContainerState_CONTAINER_EXITED),
	}})
	c, ctx := dial(t, ep)
	for name, want := range map[string]bool{"kube-proxy": true, "kube-flannel": false, "coredns": false} {
		got, err := c.Running(ctx, name)
		if assert.NoError(t, err, "Running(%s)", name) {
			assert.Equal(t, want, got, "Running(%s)", name)
		}
	}
}

// dial returns a client of the runtime at ep and a context of 10 s, both
// ended with the test.
func dial(t *testing.T, ep string) (*Client, context.Context) {
	t.Helper()
	c, err := New(ep)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}

// Created is the newest running container's creation time; Stop stops
// every running container of the name, and nothing else.
func TestCreatedAndStop(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 5, time.UTC)
	container := func(id, name string, created time.Time, state runtimeapi.ContainerState) *runtimeapi.Container {
		return &runtimeapi.Container{Id: id, State: state, CreatedAt: created.UnixNano(), Labels: map[string]string{containerNameLabel: name}}
	}
	r := &runtime{containers: []*runtimeapi.Container{
		container("old", "kube-apiserver", at.Add(-time.Hour), runtimeapi.ContainerState_CONTAINER_EXITED),
		container("a", "kube-apiserver", at, runtimeapi.ContainerState_CONTAINER_RUNNING),
		container("b", "kube-apiserver", at.Add(-time.Minute), runtimeapi.ContainerState_CONTAINER_RUNNING),
		container("etcd", "etcd", at.Add(time.Hour), runtimeapi.ContainerState_CONTAINER_RUNNING),
	}}
	c, ctx := dial(t, serve(t, r))
	got, err := c.Created(ctx, "kube-apiserver")
	if assert.NoError(t, err, "Created") {
		assert.True(t, got.Equal(at), "Created = %v; want %v", got, at)
	}
	require.NoError(t, c.Stop(ctx, "kube-apiserver", 30*time.Second))
	assert.Equal(t, []string{"a", "b"}, r.stopped, "stopped; want the running kube-apiserver containers a and b")
	got, err = c.Created(ctx, "kube-apiserver")
	if assert.NoError(t, err, "Created after Stop") {
		assert.True(t, got.IsZero(), "Created after Stop = %v; want the zero time", got)
	}
}
