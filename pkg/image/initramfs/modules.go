package initramfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// moduleIndex is a kernel module tree's modules.dep and modules.builtin.
type moduleIndex struct {
	dir     string
	deps    map[string][]string // name -> dependency names
	paths   map[string]string   // name -> path relative to dir
	builtin map[string]bool
}

// moduleName normalizes a path or name to the kernel's module name.
func moduleName(p string) string {
	base := filepath.Base(p)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

func readModuleIndex(dir string) (*moduleIndex, error) {
	idx := &moduleIndex{dir: dir, deps: map[string][]string{}, paths: map[string]string{}, builtin: map[string]bool{}}
	if err := eachLine(filepath.Join(dir, "modules.dep"), func(line string) {
		mod, deps, ok := strings.Cut(line, ":")
		if !ok {
			return
		}
		name := moduleName(mod)
		idx.paths[name] = mod
		for _, d := range strings.Fields(deps) {
			idx.deps[name] = append(idx.deps[name], moduleName(d))
		}
	}); err != nil {
		return nil, err
	}
	if err := eachLine(filepath.Join(dir, "modules.builtin"), func(line string) {
		idx.builtin[moduleName(line)] = true
	}); err != nil {
		return nil, err
	}
	return idx, nil
}

func eachLine(path string, fn func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read module index: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); line != "" {
			fn(line)
		}
	}
	return s.Err()
}

// loadOrder returns the modules to load for the wanted names, every
// dependency before its users, builtins left out. An unknown name is an
// error: a typo in the build spec must not produce an initramfs that cannot
// find its disk.
func (idx *moduleIndex) loadOrder(want []string) ([]string, error) {
	var order []string
	done := map[string]bool{}
	var visit func(name string, stack []string) error
	visit = func(name string, stack []string) error {
		if done[name] || idx.builtin[name] {
			return nil
		}
		if _, ok := idx.paths[name]; !ok {
			return fmt.Errorf("kernel module %q is neither built in nor in modules.dep (chain %s)", name, strings.Join(append(stack, name), " -> "))
		}
		done[name] = true
		for _, d := range idx.deps[name] {
			if err := visit(d, append(stack, name)); err != nil {
				return err
			}
		}
		order = append(order, name)
		return nil
	}
	for _, w := range want {
		if err := visit(moduleName(w), nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
