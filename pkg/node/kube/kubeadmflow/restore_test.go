package kubeadmflow

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// reports collects a flow's reports as "step: result: detail".
func reports(f *Flow) *[]string {
	var got []string
	f.Report = host.ReporterFunc(func(name string, result step.Result, detail string) {
		got = append(got, name+": "+string(result)+": "+detail)
	})
	return &got
}

func TestRestoreStep(t *testing.T) {
	cfg := &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Name: "lab", Role: machineconfig.RoleInit, NodeIP: "10.0.0.11"}}

	t.Run("no stick: a new cluster", func(t *testing.T) {
		f := testFlow(t, nil)
		got := reports(f)
		require.NoError(t, restoreEtcd(context.Background(), f, cfg))
		assert.Contains(t, *got, stepRestore+": skipped: no TERRA-BACKUP stick: a new cluster")
	})

	t.Run("never over this formation's etcd", func(t *testing.T) {
		f := testFlow(t, nil)
		got := reports(f)
		require.NoError(t, os.MkdirAll(filepath.Dir(f.Path(layout.EtcdManifest)), 0o755))
		require.NoError(t, os.WriteFile(f.Path(layout.EtcdManifest), []byte("static pod"), 0o600))
		asked := false
		f.Backups = func(context.Context, func(string) error) (bool, error) { asked = true; return true, nil }
		require.NoError(t, restoreEtcd(context.Background(), f, cfg))
		assert.False(t, asked, "a stick is not even looked at once etcd's manifest exists")
		assert.Contains(t, *got, stepRestore+": skipped: this formation's etcd exists already")
	})

	t.Run("a backup that cannot be restored stops the formation", func(t *testing.T) {
		f := testFlow(t, nil)
		data := f.Path(layout.EtcdDataDir + "/member/keep")
		require.NoError(t, os.MkdirAll(filepath.Dir(data), 0o700))
		require.NoError(t, os.WriteFile(data, []byte("x"), 0o600))
		junk := filepath.Join(t.TempDir(), "terrarium-backup-lab-cp-1-20261126T100000Z.age")
		require.NoError(t, os.WriteFile(junk, []byte("not a backup"), 0o600))
		f.Backups = func(ctx context.Context, fn func(string) error) (bool, error) { return true, fn(junk) }
		err := restoreEtcd(context.Background(), f, cfg)
		require.ErrorContains(t, err, "only control planes", "this config carries no CA key")
		assert.FileExists(t, data, "nothing on disk changed")
	})
}

// The restore comes after kubeadm's certificates and before its etcd.
func TestRestoreStepOrder(t *testing.T) {
	var names []string
	for _, st := range steps(&machineconfig.Cluster{Role: machineconfig.RoleInit}) {
		names = append(names, st.name)
	}
	i := func(name string) int {
		for j, n := range names {
			if n == name {
				return j
			}
		}
		t.Fatalf("no step %q in %v", name, names)
		return -1
	}
	assert.Less(t, i("init phase kubeconfig all"), i(stepRestore))
	assert.Less(t, i(stepRestore), i("init phase etcd local"))
	for _, role := range []string{machineconfig.RoleControlPlane, machineconfig.RoleWorker} {
		for _, st := range steps(&machineconfig.Cluster{Role: role}) {
			assert.NotEqual(t, stepRestore, st.name, "only the init node restores")
		}
	}
}
