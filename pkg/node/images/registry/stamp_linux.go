package registry

import (
	"os"
	"syscall"
)

// stampOf is what tells path's file from the next one renamed over it.
func stampOf(path string) (indexStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return indexStamp{}, err
	}
	s := indexStamp{size: fi.Size(), modTime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s, nil
}
