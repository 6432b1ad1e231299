package registryd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	contract "github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// TestSideloadTakes runs the registry with a side-load disk it takes: an
// unsigned one on a node that trusts no key (the console says so, once),
// a signed one on a node that trusts its key for bundles, and a signed one
// that says it replaces a tag the node has (the tag moves, the console and
// the side-load log name the old digest).
func TestSideloadTakes(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	const ref = "quay.io/terrarium/sideloaded:1.0"
	trusts := `{"requireSignedBundles": true, "bundleKeys": ["` + pub.String() + `"]}`
	old, img := randomImage(t), randomImage(t)
	for _, tc := range []struct {
		name     string
		config   string
		sign     bool
		replaces bool
		had      v1.Image // what the node's cache has as ref before
		console  []string
		unsigned bool
	}{{
		name:     "unsigned, on a node that trusts no key",
		config:   `{"requireSignedBundles": false}`,
		unsigned: true,
		console: []string{
			"this node trusts no key: took an UNSIGNED bundle from %[1]s; add a key trusted for bundles to trustedKeys to require signatures",
			"bundle disk %[1]s added 1 images to the cache: [" + ref + "]",
		},
	}, {
		name:    "signed by a key the node trusts for bundles",
		config:  trusts,
		sign:    true,
		console: []string{"bundle disk %[1]s added 1 images to the cache (signed by key " + pub.ID() + "): [" + ref + "]"},
	}, {
		name:   "signed, and says it replaces the tag the node has",
		config: trusts, sign: true, replaces: true, had: old,
		console: []string{
			"bundle disk %[1]s replaced " + ref + ": it was " + digest(t, old).String() + ", now " + digest(t, img).String() +
				" (the bundle is signed by key " + pub.ID() + " and says it replaces it, at generation 1)",
			"bundle disk %[1]s added 1 images to the cache (signed by key " + pub.ID() + "): [" + ref + "]",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			console := &consoleBuffer{}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			sl := &SideLoader{MountDir: filepath.Join(dir, "disk"), Console: console, Log: log, Interval: 5 * time.Millisecond,
				Record: filepath.Join(dir, "sideloads.jsonl")}
			var mounts atomic.Int32
			fakeDisk(t, sl, &mounts)
			dev := filepath.Join(sl.LabelDir, contract.LabelBundle)

			p, err := layout.Write(sl.MountDir, empty.Index)
			require.NoError(t, err)
			ann := map[string]string{"org.opencontainers.image.ref.name": ref}
			if tc.replaces {
				ann[contract.BundleReplacesAnnotation] = "true"
				ann[contract.BundleGenerationAnnotation] = "1"
			}
			require.NoError(t, p.AppendImage(img, layout.WithAnnotations(ann)))
			if tc.sign {
				signDisk(t, sl.MountDir, key)
			}
			if tc.had != nil {
				c, err := registry.OpenCache(filepath.Join(dir, "cache"))
				require.NoError(t, err)
				_, err = c.AddImage(context.Background(), ref, tc.had)
				require.NoError(t, err)
			}
			cfg := filepath.Join(dir, "registry.json")
			require.NoError(t, os.WriteFile(cfg, []byte(tc.config), 0o644))

			addr := freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := startRun(t, ctx, Options{
				CacheDir: filepath.Join(dir, "cache"), ConfigFile: cfg, Loopback: addr, Log: log, SideLoad: sl,
			})
			require.Eventually(t, func() bool { return strings.Contains(console.String(), "added 1 images") },
				10*time.Second, 5*time.Millisecond, "console: %s", console)
			time.Sleep(20 * sl.Interval) // more polls: the disk is not taken again
			out := console.String()
			t.Log(out)
			for _, w := range tc.console {
				assert.Equal(t, 1, strings.Count(out, fmt.Sprintf(w, dev)), "once on the console: %s", fmt.Sprintf(w, dev))
			}
			if !tc.unsigned {
				assert.NotContains(t, out, "UNSIGNED")
			}
			assert.NotContains(t, out, "refused")

			resp, err := http.Get(fmt.Sprintf("http://%s/v2/terrarium/sideloaded/manifests/1.0?ns=quay.io", addr))
			require.NoError(t, err)
			_ = resp.Body.Close() // only the status and headers count
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, digest(t, img).String(), resp.Header.Get("Docker-Content-Digest"), "the registry serves the side-loaded image")

			recs, err := ReadSideloadLog(sl.Record)
			require.NoError(t, err)
			require.Len(t, recs, 1)
			rec := recs[0]
			assert.Equal(t, SideloadAdded, rec.Outcome)
			assert.Equal(t, dev, rec.Disk)
			assert.Equal(t, []string{ref}, rec.Added)
			assert.Positive(t, rec.Bytes)
			if tc.sign {
				assert.Equal(t, pub.ID(), rec.Signer)
			} else {
				assert.Empty(t, rec.Signer)
			}
			if tc.had != nil {
				assert.Equal(t, []registry.ReplacedTag{{Ref: ref, Old: digest(t, old), New: digest(t, img), Generation: 1}}, rec.Replaced,
					"the log records the digest the tag had")
			} else {
				assert.Empty(t, rec.Replaced)
			}
			cancel()
			require.NoError(t, <-done)
		})
	}
}

// The side-load log keeps the newest records, and what it read of a log
// with a bad line.
func TestSideloadLogKeepsTheNewest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sideloads.jsonl")
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range sideloadLogKeep + 5 {
		require.NoError(t, appendSideloadLog(path, SideloadRecord{At: at.Add(time.Duration(i) * time.Second), Disk: "/dev/sdb", Outcome: SideloadAdded}))
	}
	recs, err := ReadSideloadLog(path)
	require.NoError(t, err)
	require.Len(t, recs, sideloadLogKeep)
	assert.Equal(t, at.Add(5*time.Second), recs[0].At, "the oldest went")
	assert.Equal(t, at.Add((sideloadLogKeep+4)*time.Second), recs[len(recs)-1].At)

	bad := filepath.Join(t.TempDir(), "sideloads.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"outcome":"added","disk":"a"}`+"\n{cut short\n"), 0o644))
	err = appendSideloadLog(bad, SideloadRecord{Disk: "b", Outcome: SideloadRefused, Error: "no"})
	assert.ErrorContains(t, err, "line 2")
	recs, err = ReadSideloadLog(bad)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, "a", recs[0].Disk)
	assert.Equal(t, "b", recs[1].Disk)
}
