package kubeadmflow

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/localvolumes"
	"github.com/terrarium-os/terrarium/pkg/node/kube/volumebackup"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// fakeVolumes is a volume area that records what it was asked.
type fakeVolumes struct {
	ensured []int64
	kept    []int64
	disks   []*machineconfig.DiskSelector
	result  localvolumes.Result
	err     error
	checked int
}

func (f *fakeVolumes) Ensure(_ context.Context, spec localvolumes.Spec) (localvolumes.Result, error) {
	f.ensured = append(f.ensured, spec.Size)
	f.kept = append(f.kept, spec.Keep)
	f.disks = append(f.disks, spec.Disk)
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
				if name == StepLocalVolumes {
					reports = append(reports, strings.Join([]string{name, string(r), detail}, " "))
				}
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

// A new node restores its volumes from the backup of its name on a
// TERRA-BACKUP stick before its kubelet starts; a node that has joined
// never does, whatever stick is inserted.
func TestLocalVolumesPhaseRestores(t *testing.T) {
	ctx := context.Background()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	pass, err := backup.VolumesPassphrase(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), "lab", "w-1")
	require.NoError(t, err)
	c := &machineconfig.Config{Hostname: "w-1", Cluster: &machineconfig.Cluster{
		Name: "lab", Role: machineconfig.RoleWorker, CACertHash: "sha256:" + strings.Repeat("ab", 32),
		Backup: &machineconfig.Backup{VolumesPassphrase: pass},
	}}
	// The old node's area and its backup on a stick.
	old := testFlow(t, nil)
	area := old.Path(layout.LocalVolumesDir)
	require.NoError(t, os.MkdirAll(filepath.Join(area, "pvc-1_default_data-db-0"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(area, layout.LocalVolumesMarker), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(area, "pvc-1_default_data-db-0", "token"), []byte("token-1"), 0o644))
	stick := t.TempDir()
	_, err = volumebackup.Write(ctx, old.Host, c, "0.1.0", stick, volumebackup.WithSpace(diskspace.Fixed{Avail: 1 << 30, Device: 1}, 0))
	require.NoError(t, err)
	fromStick := func(_ context.Context, fn func(string) error) (bool, error) { return true, fn(stick) }

	for _, joined := range []bool{false, true} {
		f := testFlow(t, nil)
		f.Volumes, f.VolumeBackups = &fakeVolumes{result: localvolumes.Result{Size: 1 << 30, Made: true}}, fromStick
		area := f.Path(layout.LocalVolumesDir)
		require.NoError(t, os.MkdirAll(area, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(area, layout.LocalVolumesMarker), nil, 0o644))
		if joined {
			require.NoError(t, os.MkdirAll(filepath.Dir(f.Path(KubeletKubeconfig)), 0o755))
			require.NoError(t, os.WriteFile(f.Path(KubeletKubeconfig), nil, 0o600))
		}
		var reports []string
		f.Report = host.ReporterFunc(func(name string, r step.Result, detail string) {
			if name == StepRestoreVolumes {
				reports = append(reports, string(r)+" "+detail)
			}
		})
		for _, p := range f.Phases() {
			if p.Name == PhaseLocalVolumes {
				require.NoError(t, p.Apply(ctx, c))
			}
		}
		token, err := os.ReadFile(filepath.Join(area, "pvc-1_default_data-db-0", "token"))
		if joined {
			assert.Empty(t, reports)
			assert.ErrorIs(t, err, fs.ErrNotExist, "a joined node restores nothing")
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, "token-1", string(token))
		require.Len(t, reports, 1)
		assert.Regexp(t, `^restored 1 volumes, 7 bytes: pvc-1_default_data-db-0 \(1 files, 7 bytes\) of w-1 taken at \S+ \S+ from terrarium-volumes-lab-w-1-\d{8}T\d{6}Z\.age into /var/lib/terrarium/volumes$`, reports[0])
	}
}
