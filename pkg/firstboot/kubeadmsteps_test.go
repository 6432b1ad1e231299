package firstboot

import (
	"slices"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/machineconfig"
)

// Every role's preflight ignores SystemVerification and the checks the
// config names, and nothing else.
func TestPreflightIgnoresWhatTheConfigNames(t *testing.T) {
	for _, role := range []string{machineconfig.RoleInit, machineconfig.RoleControlPlane, machineconfig.RoleWorker} {
		for _, tt := range []struct {
			ignore []string
			want   string
		}{
			{nil, "--ignore-preflight-errors=SystemVerification"},
			{[]string{"NumCPU", "Mem"}, "--ignore-preflight-errors=SystemVerification,NumCPU,Mem"},
		} {
			c := &machineconfig.Cluster{Role: role, IgnorePreflightErrors: tt.ignore}
			var flags []string
			for _, s := range steps(c) {
				for _, a := range s.args {
					if strings.HasPrefix(a, "--ignore-preflight-errors") {
						if !strings.HasSuffix(s.name, "phase preflight") {
							t.Errorf("%s: step %q ignores preflight errors", role, s.name)
						}
						flags = append(flags, a)
					}
				}
			}
			if !slices.Equal(flags, []string{tt.want}) {
				t.Errorf("%s with ignorePreflightErrors %v: preflight flags %q, want [%s]", role, tt.ignore, flags, tt.want)
			}
		}
	}
}
