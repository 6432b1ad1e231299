// Package grubenv reads and writes a GRUB environment block: the file
// GRUB's load_env reads and its save_env rewrites in place, sector by
// sector, so that GRUB can record something across a reboot on a
// filesystem it cannot otherwise write. A block is GRUB's signature line,
// name=value lines, and '#' up to its fixed size.
//
// Terrarium's BIOS boot keeps two things in one (layout.ESPGrubEnv): the
// slot last installed, which GRUB tries first, and the tries GRUB made of
// a counted Boot Loader Spec entry that the node has not yet counted in
// the entry's name (docs/on-disk-contract.md#bios-boot). Names and values
// are kept to a plain alphabet, so that no value needs GRUB's escapes, and
// everything must fit in the block's first sector: a power cut that tears
// a write between its two sectors leaves the second, all '#', as it was.
package grubenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Signature opens every block.
const Signature = "# GRUB Environment Block\n"

// Size is the size of the blocks Terrarium writes (grub-editenv's), and
// Sector the part of it that holds everything.
const (
	Size   = 1024
	Sector = 512
)

// ErrNotBlock is returned for content that is not an environment block.
var ErrNotBlock = errors.New("not a GRUB environment block")

// Env is a block's variables.
type Env map[string]string

// Parse reads a block. Lines that are not name=value (GRUB's padding,
// a comment) are skipped, as GRUB skips them.
func Parse(b []byte) (Env, error) {
	if !bytes.HasPrefix(b, []byte(Signature)) {
		return nil, ErrNotBlock
	}
	env := Env{}
	for _, line := range strings.Split(string(b[len(Signature):]), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || validName(name) != nil || validValue(value) != nil {
			continue
		}
		env[name] = value
	}
	return env, nil
}

// Encode writes env as a block of Size bytes, its variables sorted by
// name. It refuses names or values outside the plain alphabet and a block
// whose variables do not fit in the first Sector.
func Encode(env Env) ([]byte, error) {
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString(Signature)
	for _, n := range names {
		if err := validName(n); err != nil {
			return nil, err
		}
		if err := validValue(env[n]); err != nil {
			return nil, fmt.Errorf("variable %s: %w", n, err)
		}
		if env[n] == "" {
			continue // GRUB's save_env of an unset variable deletes it
		}
		fmt.Fprintf(&b, "%s=%s\n", n, env[n])
	}
	if b.Len() > Sector {
		return nil, fmt.Errorf("the environment block's variables take %d bytes, more than its first %d-byte sector", b.Len(), Sector)
	}
	b.Write(bytes.Repeat([]byte{'#'}, Size-b.Len()))
	return b.Bytes(), nil
}

// validName accepts GRUB variable names: a letter or '_', then letters,
// digits and '_'.
func validName(n string) error {
	if n == "" {
		return errors.New("an empty variable name")
	}
	for i, r := range n {
		letter := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || r < '0' || r > '9') {
			return fmt.Errorf("variable name %q: use letters, digits and _", n)
		}
	}
	return nil
}

// validValue accepts what needs no escape in a block or in GRUB's
// script: letters, digits and ". + - _".
func validValue(v string) error {
	for _, r := range v {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".+-_", r)
		if !ok {
			return fmt.Errorf("value %q: use letters, digits and . + - _", v)
		}
	}
	return nil
}

// UpdateFile applies change to the block in the file at path and writes
// it back in place when it changed: the same size (GRUB's save_env finds
// the block by its sectors), then synced. A missing file is an error that
// wraps fs.ErrNotExist.
func UpdateFile(path string, change func(Env)) (changed bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	env, err := Parse(b)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	change(env)
	after, err := Encode(env)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(b, after) {
		return false, nil
	}
	if len(b) != Size {
		return false, fmt.Errorf("%s is %d bytes, not a %d-byte environment block: GRUB could not write it in place", path, len(b), Size)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false, err
	}
	if _, err = f.WriteAt(after, 0); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}
