//go:build unix

package ignition

import (
	"io/fs"
	"syscall"
)

// fileOwner is a file's owner, ok false when the platform does not say.
func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
