package firstboot

import (
	"os"
	"testing"
)

func TestApplyAdminChownsKeys(t *testing.T) {
	// The .ssh directory and authorized_keys belong to the admin user.
	e := newEnv(t)
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/home/ops/.ssh", "/home/ops/.ssh/authorized_keys"} {
		fi, err := os.Stat(e.path(p))
		if err != nil {
			t.Fatal(err)
		}
		if uid, gid, ok := fileOwner(fi); ok && (uid != os.Getuid() || gid != os.Getgid()) {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, uid, gid, os.Getuid(), os.Getgid())
		}
	}
}
