package kubeadmflow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/localvolumes"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// fakeVolumes is a volume area that records what it was asked.
type fakeVolumes struct {
	ensured []int64
	kept    []int64
	result  localvolumes.Result
	err     error
	checked int
}

func (f *fakeVolumes) Ensure(_ context.Context, size, keep int64) (localvolumes.Result, error) {
	f.ensured = append(f.ensured, size)
	f.kept = append(f.kept, keep)
	return f.result, f.err
}

func (f *fakeVolumes) Check() error {
	f.checked++
	return f.err
}

func TestLocalVolumesPhase(t *testing.T) {
	ctx := context.Background()
	cfg := func(storage *machineconfig.LocalStorage) *machineconfig.Config {
		return &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleWorker, LocalStorage: storage}}
	}
	phase := func(f *Flow) (apply, verify func(*machineconfig.Config) error) {
		for _, p := range f.Phases() {
			if p.Name == PhaseLocalVolumes {
				return func(c *machineconfig.Config) error { return p.Apply(ctx, c) },
					func(c *machineconfig.Config) error { return p.Verify(ctx, c) }
			}
		}
		t.Fatal("no local-volumes phase")
		return nil, nil
	}

	for _, tt := range []struct {
		name    string
		storage *machineconfig.LocalStorage
		result  localvolumes.Result
		ensured []int64
		report  string
	}{
		{name: "default size", result: localvolumes.Result{Size: 1 << 30, Made: true}, ensured: []int64{0}, report: "volume area applied 1024 MiB on TERRA-STATE"},
		{name: "sized", storage: &machineconfig.LocalStorage{Size: "20GiB"}, result: localvolumes.Result{Size: 20 << 30}, ensured: []int64{20 << 30}},
		{name: "no room", result: localvolumes.Result{Skipped: "no room"}, ensured: []int64{0}, report: "volume area skipped no room"},
		{name: "disabled", storage: &machineconfig.LocalStorage{Disabled: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := testFlow(t, nil)
			vols := &fakeVolumes{result: tt.result}
			f.Volumes = vols
			var reports []string
			f.Report = host.ReporterFunc(func(name string, r step.Result, detail string) {
				reports = append(reports, strings.Join([]string{name, string(r), detail}, " "))
			})
			apply, verify := phase(f)
			require.NoError(t, apply(cfg(tt.storage)))
			assert.Equal(t, tt.ensured, vols.ensured)
			for _, k := range vols.kept {
				assert.Equal(t, int64(2<<30), k, "the default state reserve and the headroom stay free")
			}
			if tt.report != "" {
				assert.Equal(t, []string{tt.report}, reports)
			} else {
				assert.Empty(t, reports)
			}
			require.NoError(t, verify(cfg(tt.storage)))
			if tt.storage != nil && tt.storage.Disabled {
				assert.Zero(t, vols.checked, "a cluster without local storage has no area to check")
			}
		})
	}

	f := testFlow(t, nil)
	f.Volumes = &fakeVolumes{err: errors.New("mount the volume area: exit status 32")}
	apply, verify := phase(f)
	assert.ErrorContains(t, apply(cfg(nil)), "mount the volume area")
	assert.Error(t, verify(cfg(nil)), "drift")
	assert.NoError(t, apply(&machineconfig.Config{}), "a node without a cluster has no area")
}
