package registryd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	contract "github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

const (
	helloRef     = "docker.io/library/hello:1.0"
	apiserverRef = "registry.k8s.io/kube-apiserver:v1.36.3"
)

// A side-load disk is mounted read-only, without devices, programs or
// set-uid bits.
func TestSideloadMountFlags(t *testing.T) {
	assert.Equal(t, uintptr(unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_NOSUID), media.MountFlags(media.Read))
}

// TestSideloadRefusesExt4: a bundle disk of ext4 (what `imagebuild bundle
// disk` wrote before it wrote FAT32) is refused by name before the kernel
// is asked to mount it, and says how to make one the node takes.
func TestSideloadRefusesExt4(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "sdc")
	sb := make([]byte, 4096)
	sb[0x438], sb[0x439], sb[0x460] = 0x53, 0xef, 0x40 // ext's magic, extents
	require.NoError(t, os.WriteFile(disk, sb, 0o600))
	labels := t.TempDir()
	require.NoError(t, os.Symlink(disk, filepath.Join(labels, contract.LabelBundle)))
	var console consoleBuffer
	sl := &SideLoader{LabelDir: labels, MountDir: filepath.Join(t.TempDir(), "mnt"), Console: &console, Log: slog.New(slog.DiscardHandler)}
	sl.take(context.Background(), filepath.Join(labels, contract.LabelBundle), nil)
	assert.Equal(t, "terrarium: bundle disk "+filepath.Join(labels, contract.LabelBundle)+" refused, nothing was added to the cache (the registry keeps serving): "+
		"the stick "+disk+" (TERRA-BUNDLE) holds an ext4 filesystem; the node reads only FAT, exFAT or ISO 9660 sticks, so that its kernel never parses another filesystem made by whoever holds the stick: "+
		"write the disk again with `imagebuild bundle disk` (FAT32) and copy it to the stick\n", console.String())
}

// consoleBuffer collects console lines written by the side-loader.
type consoleBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (c *consoleBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *consoleBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// writeLayout writes an OCI layout in dir holding images under their refs.
func writeLayout(t *testing.T, dir string, imgs map[string]v1.Image) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	for ref, img := range imgs {
		require.NoError(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": ref, "io.containerd.image.name": ref,
		})))
	}
}

// writeReplacing writes a layout in dir holding img as ref, its entry
// saying it replaces the tag at generation.
func writeReplacing(t *testing.T, dir, ref string, img v1.Image, generation string) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref, contract.BundleReplacesAnnotation: "true", contract.BundleGenerationAnnotation: generation,
	})))
}

// signDisk signs the layout in dir for bundles with key.
func signDisk(t *testing.T, dir string, key ed25519.PrivateKey) {
	t.Helper()
	index, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, contract.BundleIndexSignature), signature.SignFor(signature.PurposeBundle, key, index), 0o644))
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	require.NoError(t, err)
	return d
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(1024, 1)
	require.NoError(t, err)
	return img
}

// fakeDisk is a TERRA-BUNDLE "device" (a file in a label directory) whose
// "mount" is a directory already holding its content.
func fakeDisk(t *testing.T, sl *SideLoader, mounts *atomic.Int32) {
	t.Helper()
	sl.LabelDir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(sl.LabelDir, contract.LabelBundle), []byte("disk"), 0o644))
	sl.mount = func(dev, dir string) error {
		mounts.Add(1)
		return nil
	}
	sl.unmount = func(string) error { return nil }
}

// TestRefusedDiskKeepsServing runs the registry with a slot bundle and a
// hostile side-load disk: the disk is refused with its named error,
// reported once, and the registry keeps serving the slot's images.
func TestRefusedDiskKeepsServing(t *testing.T) {
	key, trusted, err := signature.GenerateKey()
	require.NoError(t, err)
	moved := randomImage(t) // the image a tag moves to
	for _, tc := range []struct {
		name   string
		disk   func(t *testing.T, dir string)
		want   error
		config string // registry.json; none when empty
		// before fills the node's cache before the registry starts.
		before func(t *testing.T, cacheDir string)
		space  diskspace.FS // what the side-loader sees of STATE
		text   []string     // more the console says
		// says is the refusal's own text on the console and in the log,
		// when it is not want's.
		says string
	}{{
		name: "index.json is a symlink to /dev/zero",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": randomImage(t)})
			require.NoError(t, os.Remove(filepath.Join(dir, "index.json")))
			require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, "index.json")))
		},
		want: registry.ErrSideloadOutside,
	}, {
		name: "index.json is 10 GiB",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": randomImage(t)})
			require.NoError(t, os.Truncate(filepath.Join(dir, "index.json"), 10<<30))
		},
		want: registry.ErrSideloadTooLarge,
	}, {
		name: "kube-apiserver of the slot re-tagged",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{apiserverRef: randomImage(t)})
		},
		want: registry.ErrShadowsBundle,
	}, {
		name: "unsigned, on a node that trusts a key for bundles",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": randomImage(t)})
		},
		want:   registry.ErrSideloadUnsigned,
		config: `{"requireSignedBundles": true, "bundleKeys": ["` + trusted.String() + `"]}`,
		text:   []string{"index.json: unsigned (no index.json.sig beside it)", "KEY one this node trusts for bundles (" + trusted.ID() + ")"},
	}, {
		name: "signed by a key the node trusts for configs only",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": randomImage(t)})
			signDisk(t, dir, key)
		},
		want:   registry.ErrSideloadUnsigned,
		config: `{"requireSignedBundles": true}`,
		text:   []string{"signed by key " + trusted.ID() + " (" + trusted.String() + "), which this node does not trust for bundles", "this node trusts no key for bundles"},
	}, {
		name: "unsigned; an older firstboot's registry.json with signedBundlesOnly",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": randomImage(t)})
		},
		want:   registry.ErrSideloadUnsigned,
		config: `{"signedBundlesOnly": true, "trustedKeys": ["` + trusted.String() + `"]}`,
	}, {
		name: "unsigned; an older firstboot's registry.json without keys",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": randomImage(t)})
		},
		want:   registry.ErrSideloadUnsigned,
		config: `{"peers": []}`,
		text:   []string{"written by an older firstboot", "until firstboot rewrites it and restarts the registry"},
	}, {
		name:   "an unsigned bundle moving a tag the node has",
		before: cacheHolds("quay.io/extra/app:1"),
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": moved})
		},
		want:   registry.ErrSideloadMovesTag,
		config: `{"requireSignedBundles": false}`,
		text:   []string{"quay.io/extra/app:1 is sha256:", " on this node and " + digest(t, moved).String() + " in the bundle"},
	}, {
		name:   "a signed bundle moving a tag it does not say it replaces",
		before: cacheHolds("quay.io/extra/app:1"),
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": moved})
			signDisk(t, dir, key)
		},
		want:   registry.ErrSideloadMovesTag,
		config: `{"requireSignedBundles": true, "bundleKeys": ["` + trusted.String() + `"]}`,
		text:   []string{" in the bundle", "--replace-tags"},
	}, {
		name: "a signed bundle replaying an older generation",
		before: func(t *testing.T, cacheDir string) {
			c, err := registry.OpenCache(cacheDir)
			require.NoError(t, err)
			newer := filepath.Join(t.TempDir(), "newer")
			writeReplacing(t, newer, "quay.io/extra/app:1", randomImage(t), "3")
			signDisk(t, newer, key)
			_, err = c.Sideload(context.Background(), newer, registry.SignedBy([]signature.PublicKey{trusted}))
			require.NoError(t, err)
		},
		disk: func(t *testing.T, dir string) {
			writeReplacing(t, dir, "quay.io/extra/app:1", moved, "2")
			signDisk(t, dir, key)
		},
		want:   registry.ErrSideloadReplayed,
		config: `{"requireSignedBundles": true, "bundleKeys": ["` + trusted.String() + `"]}`,
		says: "replacing quay.io/extra/app:1 is refused: its generation 2 is not above 3, which this node already applied; " +
			"sign a new bundle with --generation 4 or higher",
	}, {
		name: "too little space on STATE beside the reserve",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, map[string]v1.Image{"quay.io/extra/app:1": randomImage(t)})
		},
		want:   diskspace.ErrNoSpace,
		config: `{"requireSignedBundles": false, "stateReserveBytes": 1073741824}`,
		space:  diskspace.Fixed{Avail: 1<<30 + 1024},
		text:   []string{"the side-load of 1 images needs ", "which has 1.0 GiB free and keeps 1.0 GiB of it for etcd (state.reserveMiB)"},
	}, {
		name: "image indexes nested too deep",
		disk: func(t *testing.T, dir string) {
			writeLayout(t, dir, nil)
			p, err := layout.FromPath(dir)
			require.NoError(t, err)
			idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: randomImage(t)})
			for range 4 {
				idx = mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: idx})
			}
			require.NoError(t, p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "quay.io/extra/deep:1"})))
		},
		want: registry.ErrSideloadTooDeep,
		text: []string{"quay.io/extra/deep:1: ", "an image index 5 levels down, more than 4"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			hello, apiserver := randomImage(t), randomImage(t)
			bundleDir := filepath.Join(dir, "bundle")
			writeLayout(t, bundleDir, map[string]v1.Image{helloRef: hello, apiserverRef: apiserver})

			console := &consoleBuffer{}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			sl := &SideLoader{MountDir: filepath.Join(dir, "disk"), Console: console, Log: log, Interval: 5 * time.Millisecond,
				Space: tc.space, Record: filepath.Join(dir, "sideloads.jsonl")}
			var mounts atomic.Int32
			fakeDisk(t, sl, &mounts)
			tc.disk(t, sl.MountDir)
			if tc.before != nil {
				tc.before(t, filepath.Join(dir, "cache"))
			}

			cfg := filepath.Join(dir, "registry.json")
			if tc.config != "" {
				require.NoError(t, os.WriteFile(cfg, []byte(tc.config), 0o644))
			}
			addr := freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := startRun(t, ctx, Options{
				BundleDir: bundleDir, CacheDir: filepath.Join(dir, "cache"), ConfigFile: cfg,
				Loopback: addr, Log: log, SideLoad: sl,
			})
			require.Eventually(t, func() bool { return strings.Contains(console.String(), "refused") },
				10*time.Second, 5*time.Millisecond, "console: %s", console)
			time.Sleep(20 * sl.Interval) // more polls: the disk is not tried again
			out := console.String()
			t.Log(out)
			assert.Equal(t, 1, strings.Count(out, "refused, nothing was added"), "reported once")
			assert.Equal(t, int32(1), mounts.Load(), "mounted once")
			says := tc.want.Error()
			if tc.says != "" {
				says = tc.says
			}
			assert.Contains(t, out, says)
			for _, w := range tc.text {
				assert.Contains(t, out, w)
			}
			assert.NotContains(t, out, "UNSIGNED")
			recs, err := ReadSideloadLog(sl.Record)
			require.NoError(t, err)
			if assert.Len(t, recs, 1) {
				assert.Equal(t, SideloadRefused, recs[0].Outcome)
				assert.Contains(t, recs[0].Error, says, "the log records why")
				assert.Empty(t, recs[0].Added)
			}

			for ref, img := range map[string]v1.Image{helloRef: hello, apiserverRef: apiserver} {
				repo, tag, _ := strings.Cut(ref, ":")
				host, name, _ := strings.Cut(repo, "/")
				resp, err := http.Get(fmt.Sprintf("http://%s/v2/%s/manifests/%s?ns=%s", addr, name, tag, host))
				require.NoError(t, err)
				_ = resp.Body.Close() // only the status and headers count
				d, err := img.Digest()
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode, ref)
				assert.Equal(t, d.String(), resp.Header.Get("Docker-Content-Digest"), ref)
			}
			select {
			case err := <-done:
				t.Fatalf("Run returned: %v", err)
			default:
			}
			cancel()
			require.NoError(t, <-done)
		})
	}
}

// adderFunc is a hand-written fake of the cache.
type adderFunc func(ctx context.Context, dir string) ([]string, error)

func (f adderFunc) Sideload(ctx context.Context, dir string, _ ...registry.AddOption) (registry.Sideloaded, error) {
	refs, err := f(ctx, dir)
	return registry.Sideloaded{Added: refs}, err
}

// A refusal, or even a panic on the disk's content, is reported once and
// the watcher goes on: the service does not restart into the same disk.
func TestWatchReportsOnceAndGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  adderFunc
		want string
	}{
		{"refused", func(context.Context, string) ([]string, error) {
			return nil, fmt.Errorf("index.json: %w", registry.ErrSideloadTooLarge)
		}, registry.ErrSideloadTooLarge.Error()},
		{"panic", func(context.Context, string) ([]string, error) { panic("boom") }, "internal error while reading the disk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			console := &consoleBuffer{}
			sl := &SideLoader{MountDir: t.TempDir(), Console: console, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Interval: time.Millisecond}
			var mounts atomic.Int32
			fakeDisk(t, sl, &mounts)
			require.NoError(t, os.WriteFile(filepath.Join(sl.MountDir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
			var calls atomic.Int32
			add := adderFunc(func(ctx context.Context, dir string) ([]string, error) {
				calls.Add(1)
				return tc.add(ctx, dir)
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { sl.Watch(ctx, add); close(done) }()
			require.Eventually(t, func() bool { return strings.Contains(console.String(), "refused") }, 5*time.Second, time.Millisecond)
			time.Sleep(20 * sl.Interval)
			cancel()
			<-done
			assert.Equal(t, int32(1), calls.Load())
			assert.Equal(t, 1, strings.Count(console.String(), "refused, nothing was added"))
			assert.Contains(t, console.String(), tc.want)
		})
	}
}

// cacheHolds is a before step: the node's cache already holds a random
// image under ref.
func cacheHolds(ref string) func(t *testing.T, cacheDir string) {
	return func(t *testing.T, cacheDir string) {
		c, err := registry.OpenCache(cacheDir)
		require.NoError(t, err)
		_, err = c.AddImage(context.Background(), ref, randomImage(t))
		require.NoError(t, err)
	}
}
