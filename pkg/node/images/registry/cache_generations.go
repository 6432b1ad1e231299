package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// tagGenerationsFile, in the cache's directory beside index.json, records
// for each tag a signed replacing bundle set (layout.BundleReplacesAnnotation
// with layout.BundleGenerationAnnotation) the highest generation that set
// it and the digest it set. It is the node's defence against a replayed
// bundle, so a file that does not read back refuses every replacing
// side-load until it is fixed.
const tagGenerationsFile = "tag-generations.json"

// tagGenerationsMax bounds the file read back.
const tagGenerationsMax = 16 << 20

// tagGeneration is what the node last applied to one tag.
type tagGeneration struct {
	Generation uint64  `json:"generation"`
	Digest     v1.Hash `json:"digest"`
}

// tagGenerations is tagGenerationsFile: "host/path:tag" → what was applied.
type tagGenerations struct {
	Version int                      `json:"version"`
	Tags    map[string]tagGeneration `json:"tags"`
}

func (c *Cache) generationsPath() string { return filepath.Join(c.dir, tagGenerationsFile) }

// loadGenerations reads the generations the node applied; none when the
// file is absent.
func (c *Cache) loadGenerations() (tagGenerations, error) {
	path := c.generationsPath()
	g := tagGenerations{Version: 1, Tags: map[string]tagGeneration{}}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return g, fmt.Errorf("read the tag generations: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(&limitedFile{f: f, left: tagGenerationsMax})
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil || g.Version != 1 {
		return g, fmt.Errorf("%s does not read back (version %d, %w): it records the generation of each tag signed bundles replaced, "+
			"so no bundle may replace a tag until it does; restore it from a backup, or remove it to accept any generation again", path, g.Version, err)
	}
	if g.Tags == nil {
		g.Tags = map[string]tagGeneration{}
	}
	return g, nil
}

// saveGenerations replaces the file atomically and durably.
func (c *Cache) saveGenerations(g tagGenerations) error {
	raw, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the tag generations: %w", err)
	}
	if err := atomicfile.WriteFile(c.generationsPath(), raw, 0o644); err != nil {
		return fmt.Errorf("record the tag generations: %w", err)
	}
	return nil
}

// limitedFile reads at most left bytes, then fails (a file that large is
// not one this node wrote).
type limitedFile struct {
	f    *os.File
	left int64
}

func (l *limitedFile) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, fmt.Errorf("more than %d bytes", tagGenerationsMax)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.f.Read(p)
	l.left -= int64(n)
	return n, err
}

// parseGeneration reads a generation annotation: a whole number above 0,
// in decimal.
func parseGeneration(s string) (uint64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	g, err := strconv.ParseUint(s, 10, 64)
	return g, err == nil
}

// checkGenerations refuses a plan in which a signed replacing entry sets a
// tag to another digest without a generation above the one the node
// applied to that tag last (the same generation with the same digest is
// that bundle again, taken: its tag move may have been cut short). The
// whole bundle is refused, before anything is written, listing every such
// tag: a bundle is one signed unit, and half of it is a mix of images its
// signer never put together. It returns the generations to record once the
// bundle's tags move.
func checkGenerations(dir string, plan []layoutEntry, signed bool, applied tagGenerations) (map[string]tagGeneration, error) {
	updates := map[string]tagGeneration{}
	var refused []string
	next := uint64(1) // the lowest generation a new bundle needs
	for _, p := range plan {
		if !signed || p.desc.Annotations[layout.BundleReplacesAnnotation] != "true" {
			continue
		}
		text, given := p.desc.Annotations[layout.BundleGenerationAnnotation]
		gen, valid := parseGeneration(text)
		for _, n := range p.names {
			if n.tag == "" {
				continue
			}
			last, known := applied.Tags[n.ref()]
			changes := n.was != p.desc.Digest && (known || n.was != v1.Hash{})
			var why string
			switch {
			case given && !valid:
				why = fmt.Sprintf("its generation %q is not a whole number above 0", text)
			case changes && !given:
				why = fmt.Sprintf("the bundle gives it no generation (%s), so this node cannot tell it from an older bundle played again",
					layout.BundleGenerationAnnotation)
			case changes && known && (gen < last.Generation || gen == last.Generation && p.desc.Digest != last.Digest):
				why = fmt.Sprintf("its generation %d is not above %d, which this node already applied", gen, last.Generation)
			}
			if why != "" {
				refused = append(refused, fmt.Sprintf("replacing %s is refused: %s", n.ref(), why))
				next = max(next, last.Generation+1)
				continue
			}
			if valid && (!known || gen > last.Generation) {
				updates[n.ref()] = tagGeneration{Generation: gen, Digest: p.desc.Digest}
			}
		}
	}
	if len(refused) > 0 {
		return nil, &refusal{
			msg: fmt.Sprintf("add layout %s: %s; sign a new bundle with --generation %d or higher", dir, strings.Join(refused, "; "), next),
			is:  []error{ErrSideloadReplayed},
		}
	}
	return updates, nil
}

// planGenerations checks plan against the generations the node applied
// (checkGenerations). A bundle that replaces no tag needs no record, so
// only a replacing one is refused when the record does not read back.
func (c *Cache) planGenerations(dir string, plan []layoutEntry, signed bool) (tagGenerations, map[string]tagGeneration, error) {
	applied, err := c.loadGenerations()
	if err != nil {
		for _, p := range plan {
			if signed && p.desc.Annotations[layout.BundleReplacesAnnotation] == "true" {
				return applied, nil, fmt.Errorf("add layout %s: %w", dir, err)
			}
		}
		return applied, nil, nil
	}
	updates, err := checkGenerations(dir, plan, signed, applied)
	return applied, updates, err
}

// recordGenerations writes the generations of a bundle's tags before the
// tags move, so a power cut between the two leaves the record ahead of
// the tags, never behind: the same bundle is then taken again (same
// generation, same digest) and completes the move. It returns what undoes
// the write, for a move that fails.
func (c *Cache) recordGenerations(applied tagGenerations, updates map[string]tagGeneration) (undo func(), err error) {
	if len(updates) == 0 {
		return func() {}, nil
	}
	next := tagGenerations{Version: 1, Tags: make(map[string]tagGeneration, len(applied.Tags)+len(updates))}
	for ref, g := range applied.Tags {
		next.Tags[ref] = g
	}
	for ref, g := range updates {
		next.Tags[ref] = g
	}
	if err := c.saveGenerations(next); err != nil {
		return nil, err
	}
	return func() {
		if err := c.saveGenerations(applied); err != nil {
			c.log.Warn("registry: restore the tag generations after a failed side-load", "err", err)
		}
	}, nil
}
