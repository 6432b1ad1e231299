package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Key accumulates the inputs of an artifact into a content hash. Every
// input is length-prefixed and tagged, so different input lists never
// collide.
type Key struct {
	h   io.Writer
	sum func() []byte
	err error
}

// NewKey starts a key for the named artifact kind.
func NewKey(kind string) *Key {
	h := sha256.New()
	k := &Key{h: h, sum: func() []byte { return h.Sum(nil) }}
	k.String("kind", kind)
	return k
}

// String adds a named string input.
func (k *Key) String(name, v string) *Key {
	_, _ = fmt.Fprintf(k.h, "%d:%s=%d:%s\n", len(name), name, len(v), v) // a hash never fails a write
	return k
}

// Strings adds a named list.
func (k *Key) Strings(name string, vs []string) *Key {
	k.String(name, fmt.Sprint(len(vs)))
	for _, v := range vs {
		k.String(name+"[]", v)
	}
	return k
}

// File adds a file's content.
func (k *Key) File(name, path string) *Key {
	if k.err != nil {
		return k
	}
	f, err := os.Open(path)
	if err != nil {
		k.err = fmt.Errorf("hash input %s: %w", name, err)
		return k
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		k.err = fmt.Errorf("hash input %s: %w", name, err)
		return k
	}
	return k.String(name, hex.EncodeToString(h.Sum(nil)))
}

// Tree adds a directory tree: every path, mode, link target and content,
// in sorted order. A root that is a symbolic link is the tree it points
// to (links inside the tree are hashed as links).
func (k *Key) Tree(name, root string) *Key {
	if k.err != nil {
		return k
	}
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		k.err = fmt.Errorf("hash input %s: %w", name, err)
		return k
	}
	var paths []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		k.err = fmt.Errorf("hash input %s: %w", name, err)
		return k
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			k.err = fmt.Errorf("hash input %s: %w", name, err)
			return k
		}
		k.String(name+"/path", rel).String("mode", fi.Mode().String())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			k.String("link", t)
		case fi.Mode().IsRegular():
			k.File("content", p)
		}
	}
	return k
}

// Sum returns the hex key, or the first error met while hashing.
func (k *Key) Sum() (string, error) {
	if k.err != nil {
		return "", k.err
	}
	return hex.EncodeToString(k.sum()), nil
}
