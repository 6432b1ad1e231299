package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/slotindex"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// slotTree is a small Debian-like root: per-machine identity, an initrd,
// and content in every directory that moves to /var.
func slotTree() []entry {
	return []entry{
		tDir("./"),
		tDir("etc/"),
		tFile("etc/hostname", "debian\n"),
		tFile("etc/machine-id", "0123456789abcdef0123456789abcdef\n"),
		tDir("etc/ssh/"),
		tFile("etc/ssh/sshd_config", "PermitRootLogin no\n"),
		{name: "etc/ssh/ssh_host_ed25519_key", content: "PRIVATE", mode: 0o600},
		tFile("etc/ssh/ssh_host_ed25519_key.pub", "ssh-ed25519 AAAA"),
		tDir("var/"),
		tDir("var/lib/"),
		tDir("var/lib/dbus/"),
		tFile("var/lib/dbus/machine-id", "0123456789abcdef0123456789abcdef\n"),
		tDir("var/lib/dpkg/"),
		tFile("var/lib/dpkg/status", "Package: base-files\n"),
		tDir("home/"),
		tDir("home/alice/"),
		tFile("home/alice/notes", "alice's notes\n"),
		{name: "root/", mode: 0o700},
		tFile("root/.profile", "PATH=/usr/bin\n"),
		tDir("usr/"),
		tDir("usr/bin/"),
		tExe("usr/bin/true", "true binary"),
		tDir("usr/local/"),
		tDir("usr/local/bin/"),
		tExe("usr/local/bin/x", "local tool\n"),
		tDir("boot/"),
		tFile("boot/initrd.img-6.1", "initrd"),
		tFile("boot/vmlinuz-6.1", "kernel"),
		tSymlink("initrd.img", "boot/initrd.img-6.1"),
		tSymlink("vmlinuz", "boot/vmlinuz-6.1"),
	}
}

// fakeBase is a Base entry holding only rootfs.tar made from entries.
func fakeBase(t *testing.T, key string, entries []entry) *Base {
	t.Helper()
	dir := t.TempDir()
	writeTar(t, filepath.Join(dir, BaseTar), entries)
	return &Base{Dir: dir, Key: key}
}

// slotInputs makes a full set of inputs in fresh temporary directories:
// two calls give equal content at different paths.
func slotInputs(t *testing.T, base *Base) SlotInputs {
	t.Helper()
	src := t.TempDir()
	write := func(name, content string) string {
		return filepath.Join(writeFiles(t, src, map[string]string{name: content}), name)
	}
	return SlotInputs{
		Base:      base,
		Overlay:   writeFiles(t, filepath.Join(src, "overlay"), map[string]string{"etc/terrarium/overlay.txt": "from the overlay\n"}),
		Firstboot: write("firstboot", "firstboot binary"),
		Release: release.Release{
			Name: "terrarium", Version: "1.2.3", Suite: "bookworm",
			KernelVersion: "6.1.0-x", BuiltAt: "2026-01-01T00:00:00Z",
		},
		BundleDir: bundleLayout(t, filepath.Join(src, "bundle")),
		BundleKey: "bundle-key-1",
		Programs: []Program{
			{Src: write("kubelet", "kubelet binary"), Dest: "usr/bin/kubelet", Key: "kubelet-key"},
			{Src: write("registry", "registry binary"), Dest: "usr/libexec/terrarium/registry", Key: "registry-key"},
		},
		UpgradeKeys: []string{"ed25519:AAAAkey1", "ed25519:BBBBkey2"},
	}
}

// testLayerFile is the one file of the test bundle's one layer.
const testLayerFile = "usr/share/hello/greeting"

// bundleLayout writes an OCI layout of one image of one layer, the same
// bytes every time, into dir.
func bundleLayout(t *testing.T, dir string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: testLayerFile, Mode: 0o644, Size: 6, Typeflag: tar.TypeReg, ModTime: epoch}))
	_, err := tw.Write([]byte("hello\n"))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	data := b.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, l)
	require.NoError(t, err)
	p, err := ocilayout.Write(dir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img))
	return dir
}

// unsquash extracts image into a new directory and returns it.
func unsquash(t *testing.T, image string) string {
	t.Helper()
	unsquashfs := requireTool(t, "unsquashfs")
	dest := filepath.Join(t.TempDir(), "root")
	out, err := exec.Command(unsquashfs, "-no-progress", "-d", dest, image).CombinedOutput()
	require.NoError(t, err, "unsquashfs %s:\n%s", image, out)
	return dest
}

// inRoot is layout path p (absolute in the slot) under the extracted root.
func inRoot(root, p string) string {
	return filepath.Join(root, strings.TrimPrefix(p, "/"))
}

func requireSlotTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"tar", "cp", "mksquashfs", "unsquashfs"} {
		requireTool(t, tool)
	}
}

func TestBuildSlotContents(t *testing.T) {
	requireSlotTools(t)
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	in := slotInputs(t, fakeBase(t, "base-key-1", slotTree()))

	image, cached, err := BuildSlot(context.Background(), c, in, epoch, discard)
	require.NoError(t, err)
	assert.False(t, cached, "first build of an empty cache reported cached")
	assert.Equal(t, SlotImage, filepath.Base(image))
	assert.Equal(t, filepath.Join(c.Root(), "slot"), filepath.Dir(filepath.Dir(image)))
	ents, err := os.ReadDir(filepath.Dir(image))
	require.NoError(t, err)
	require.Len(t, ents, 1, "the cache entry holds more than the image (the build root?)")
	assert.Equal(t, SlotImage, ents[0].Name())

	root := unsquash(t, image)

	t.Run("per-machine identity removed", func(t *testing.T) {
		for _, p := range []string{
			"etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_ed25519_key.pub",
			"boot/initrd.img-6.1", "initrd.img", "var/lib/dbus/machine-id",
		} {
			_, err := os.Lstat(filepath.Join(root, p))
			assert.ErrorIs(t, err, fs.ErrNotExist, "%s is still in the image", p)
		}
		// Neighbours of what is removed stay.
		for p, want := range map[string]string{
			"etc/ssh/sshd_config": "PermitRootLogin no\n",
			"boot/vmlinuz-6.1":    "kernel",
			"etc/hostname":        "debian\n",
			"var/lib/dpkg/status": "Package: base-files\n",
		} {
			assert.Equal(t, want, readFile(t, filepath.Join(root, p)), p)
		}
		fi, err := os.Lstat(filepath.Join(root, "etc/machine-id"))
		require.NoError(t, err)
		assert.True(t, fi.Mode().IsRegular())
		assert.Zero(t, fi.Size(), "etc/machine-id is not empty")
	})

	t.Run("writable directories moved to var", func(t *testing.T) {
		for from, to := range movedToVar {
			link, err := os.Readlink(filepath.Join(root, from))
			require.NoError(t, err, "%s is not a symlink", from)
			assert.False(t, filepath.IsAbs(link), "%s -> %s is absolute", from, link)
			assert.Equal(t, to, filepath.Join(filepath.Dir(from), link), "%s -> %s does not lead to %s", from, link, to)
			fi, err := os.Lstat(filepath.Join(root, to))
			require.NoError(t, err)
			assert.True(t, fi.IsDir(), "%s is not a directory", to)
		}
		for p, want := range map[string]string{
			"var/home/alice/notes":  "alice's notes\n",
			"var/roothome/.profile": "PATH=/usr/bin\n",
			"var/usrlocal/bin/x":    "local tool\n",
			// and through the links
			"home/alice/notes": "alice's notes\n",
			"root/.profile":    "PATH=/usr/bin\n",
			"usr/local/bin/x":  "local tool\n",
		} {
			assert.Equal(t, want, readFile(t, filepath.Join(root, p)), p)
		}
		fi, err := os.Stat(filepath.Join(root, "var/usrlocal/bin/x"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "moved file lost its mode")
		for _, p := range []string{"var/srv", "var/opt"} {
			ents, err := os.ReadDir(filepath.Join(root, p))
			require.NoError(t, err)
			assert.Empty(t, ents, p)
		}
	})

	t.Run("inputs installed", func(t *testing.T) {
		assert.Equal(t, "from the overlay\n", readFile(t, filepath.Join(root, "etc/terrarium/overlay.txt")))

		fb := filepath.Join(root, "usr/bin/firstboot")
		assert.Equal(t, "firstboot binary", readFile(t, fb))
		fi, err := os.Stat(fb)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())

		rel, err := release.Load(inRoot(root, layout.ReleaseFile))
		require.NoError(t, err)
		assert.Equal(t, in.Release, *rel)
		want, err := in.Release.Marshal()
		require.NoError(t, err)
		assert.Equal(t, string(want), readFile(t, inRoot(root, layout.ReleaseFile)))

		assert.Equal(t, "ed25519:AAAAkey1\ned25519:BBBBkey2\n", readFile(t, inRoot(root, layout.UpgradeKeysFile)))

		for _, name := range []string{"oci-layout", "index.json"} {
			assert.Equal(t, readFile(t, filepath.Join(in.BundleDir, name)), readFile(t, filepath.Join(inRoot(root, BundlePath), name)), name)
		}
		// The bundle's one layer, unpacked for the node's snapshotter.
		unpacked, err := filepath.Glob(filepath.Join(inRoot(root, layout.SlotLayersDir), "sha256", "*", testLayerFile))
		require.NoError(t, err)
		require.Len(t, unpacked, 1, "the bundle's layer unpacked into the slot")
		assert.Equal(t, "hello\n", readFile(t, unpacked[0]))

		for _, p := range in.Programs {
			dst := filepath.Join(root, p.Dest)
			assert.Equal(t, readFile(t, p.Src), readFile(t, dst), p.Dest)
			fi, err := os.Stat(dst)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), p.Dest)
		}

		fi, err = os.Lstat(inRoot(root, layout.StateMount))
		require.NoError(t, err)
		assert.True(t, fi.IsDir(), "%s is not a directory", layout.StateMount)
	})
}

func TestBuildSlotCache(t *testing.T) {
	requireSlotTools(t)
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	base := fakeBase(t, "base-key-1", slotTree())

	ref, cached, err := BuildSlot(ctx, c, slotInputs(t, base), epoch, discard)
	require.NoError(t, err)
	require.False(t, cached)

	seen := map[string]string{ref: "reference"}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, in *SlotInputs, at *time.Time)
		// cached: the change is not an input of the image.
		cached bool
		// check, if set, looks at the rebuilt image.
		check func(t *testing.T, root string)
	}{
		{name: "same inputs at other paths", change: func(*testing.T, *SlotInputs, *time.Time) {}, cached: true},
		{
			name: "overlay file content",
			change: inputs(func(t *testing.T, in *SlotInputs) {
				writeFiles(t, in.Overlay, map[string]string{"etc/terrarium/overlay.txt": "changed\n"})
			}),
			check: func(t *testing.T, root string) {
				assert.Equal(t, "changed\n", readFile(t, filepath.Join(root, "etc/terrarium/overlay.txt")))
			},
		},
		{
			name: "overlay file added",
			change: inputs(func(t *testing.T, in *SlotInputs) {
				writeFiles(t, in.Overlay, map[string]string{"etc/motd": "hello\n"})
			}),
		},
		{
			name: "overlay file mode",
			change: inputs(func(t *testing.T, in *SlotInputs) {
				require.NoError(t, os.Chmod(filepath.Join(in.Overlay, "etc/terrarium/overlay.txt"), 0o600))
			}),
		},
		{name: "no overlay", change: inputs(func(_ *testing.T, in *SlotInputs) { in.Overlay = "" })},
		{name: "program key", change: inputs(func(_ *testing.T, in *SlotInputs) { in.Programs[0].Key = "kubelet-key-2" })},
		{name: "program dest", change: inputs(func(_ *testing.T, in *SlotInputs) { in.Programs[1].Dest = "usr/bin/registry" })},
		{name: "program dropped", change: inputs(func(_ *testing.T, in *SlotInputs) { in.Programs = in.Programs[:1] })},
		{
			name:   "release version",
			change: inputs(func(_ *testing.T, in *SlotInputs) { in.Release.Version = "1.2.4" }),
			check: func(t *testing.T, root string) {
				rel, err := release.Load(inRoot(root, layout.ReleaseFile))
				require.NoError(t, err)
				assert.Equal(t, "1.2.4", rel.Version)
			},
		},
		{name: "release faults", change: inputs(func(_ *testing.T, in *SlotInputs) { in.Release.Faults = []string{"health"} })},
		{
			name:   "upgrade key added",
			change: inputs(func(_ *testing.T, in *SlotInputs) { in.UpgradeKeys = append(in.UpgradeKeys, "ed25519:CCCCkey3") }),
			check: func(t *testing.T, root string) {
				assert.Equal(t, "ed25519:AAAAkey1\ned25519:BBBBkey2\ned25519:CCCCkey3\n", readFile(t, inRoot(root, layout.UpgradeKeysFile)))
			},
		},
		{
			name:   "no upgrade keys",
			change: inputs(func(_ *testing.T, in *SlotInputs) { in.UpgradeKeys = nil }),
			check: func(t *testing.T, root string) {
				_, err := os.Lstat(inRoot(root, layout.UpgradeKeysFile))
				assert.ErrorIs(t, err, fs.ErrNotExist, "no keys must write no %s", layout.UpgradeKeysFile)
			},
		},
		{
			name: "firstboot content",
			change: inputs(func(t *testing.T, in *SlotInputs) {
				require.NoError(t, os.WriteFile(in.Firstboot, []byte("firstboot v2"), 0o755))
			}),
		},
		{name: "base key", change: inputs(func(_ *testing.T, in *SlotInputs) { in.Base = &Base{Dir: in.Base.Dir, Key: "base-key-2"} })},
		{name: "bundle key", change: inputs(func(_ *testing.T, in *SlotInputs) { in.BundleKey = "bundle-key-2" })},
		{name: "epoch", change: func(_ *testing.T, _ *SlotInputs, at *time.Time) { *at = at.Add(time.Second) }},
		// Documented: a program's content is identified by its Key and the
		// bundle's by BundleKey, so changing only the file keeps the entry.
		{
			name: "program content under the same key",
			change: inputs(func(t *testing.T, in *SlotInputs) {
				require.NoError(t, os.WriteFile(in.Programs[0].Src, []byte("kubelet v2"), 0o755))
			}),
			cached: true,
		},
		{
			name: "bundle content under the same key",
			change: inputs(func(t *testing.T, in *SlotInputs) {
				writeFiles(t, in.BundleDir, map[string]string{"index.json": `{"schemaVersion":2,"manifests":[]}`})
			}),
			cached: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, at := slotInputs(t, base), epoch
			tc.change(t, &in, &at)
			image, cached, err := BuildSlot(ctx, c, in, at, discard)
			require.NoError(t, err)
			if tc.cached {
				assert.True(t, cached, "unchanged inputs rebuilt the slot")
				assert.Equal(t, ref, image)
				return
			}
			assert.False(t, cached, "changed inputs reported a cached slot")
			assert.NotEqual(t, ref, image)
			if prev, ok := seen[image]; ok {
				assert.Failf(t, "two input sets share an entry", "%s and %s both gave %s", prev, tc.name, image)
			}
			seen[image] = tc.name
			// Built once, the changed inputs are cached in turn.
			again, cached, err := BuildSlot(ctx, c, in, at, discard)
			require.NoError(t, err)
			assert.True(t, cached)
			assert.Equal(t, image, again)
			if tc.check != nil {
				tc.check(t, unsquash(t, image))
			}
		})
	}
}

// inputs adapts a change of the inputs alone to the table's signature.
func inputs(f func(*testing.T, *SlotInputs)) func(*testing.T, *SlotInputs, *time.Time) {
	return func(t *testing.T, in *SlotInputs, _ *time.Time) { f(t, in) }
}

func TestBuildSlotErrors(t *testing.T) {
	requireSlotTools(t)
	requireTool(t, "chroot")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		change func(t *testing.T, in *SlotInputs)
		want   []string
	}{
		{
			name:   "missing firstboot",
			change: func(t *testing.T, in *SlotInputs) { in.Firstboot = filepath.Join(t.TempDir(), "none") },
			want:   []string{"hash input firstboot"},
		},
		{
			name:   "missing overlay",
			change: func(t *testing.T, in *SlotInputs) { in.Overlay = filepath.Join(t.TempDir(), "none") },
			want:   []string{"hash input overlay"},
		},
		{
			name:   "base without rootfs.tar",
			change: func(t *testing.T, in *SlotInputs) { in.Base = &Base{Dir: t.TempDir(), Key: "empty-base"} },
			want:   []string{"extract", BaseTar},
		},
		{
			name:   "missing program",
			change: func(t *testing.T, in *SlotInputs) { in.Programs[1].Src = filepath.Join(t.TempDir(), "none") },
			want:   []string{"customize slot root", "install usr/libexec/terrarium/registry"},
		},
		{
			// The fake tree has no systemctl to run.
			name:   "unit to enable",
			change: func(_ *testing.T, in *SlotInputs) { in.Enable = []string{"ssh.service", "chrony.service"} },
			want:   []string{"customize slot root", "systemctl enable ssh.service chrony.service"},
		},
		{
			name:   "canceled",
			ctx:    canceled,
			change: func(*testing.T, *SlotInputs) {},
			want:   []string{"context canceled"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := cache.New(t.TempDir())
			require.NoError(t, err)
			in := slotInputs(t, fakeBase(t, "base-key-1", slotTree()))
			tc.change(t, &in)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			image, cached, err := BuildSlot(ctx, c, in, epoch, discard)
			require.Error(t, err)
			assert.Empty(t, image)
			assert.False(t, cached)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			// Nothing is committed to the cache, and no scratch is left.
			ents, err := os.ReadDir(filepath.Join(c.Root(), "slot"))
			if !os.IsNotExist(err) {
				require.NoError(t, err)
			}
			assert.Empty(t, ents, "a failed build left something in the cache")
		})
	}
}

// extracted writes entries into a fresh root directory, as extractTar does.
func extracted(t *testing.T, entries []entry) string {
	t.Helper()
	requireTool(t, "tar")
	tarPath := filepath.Join(t.TempDir(), BaseTar)
	writeTar(t, tarPath, entries)
	root := filepath.Join(t.TempDir(), "root")
	require.NoError(t, extractTar(context.Background(), tarPath, root))
	return root
}

func TestCustomizeOptionalInputs(t *testing.T) {
	requireTool(t, "cp")
	// A tree with no etc/machine-id, no srv/opt/usr/local and no ssh keys.
	root := extracted(t, []entry{tDir("./"), tDir("etc/"), tDir("usr/"), tDir("usr/bin/"), tDir("var/")})
	firstboot := filepath.Join(writeFiles(t, t.TempDir(), map[string]string{"firstboot": "fb"}), "firstboot")
	rel := []byte(`{"name":"x"}` + "\n")

	epoch := time.Unix(1767225600, 0)
	require.NoError(t, customize(context.Background(), root, SlotInputs{Firstboot: firstboot}, rel, epoch))

	fi, err := os.Lstat(filepath.Join(root, "etc/machine-id"))
	require.NoError(t, err)
	assert.Zero(t, fi.Size())
	assert.Equal(t, os.FileMode(0o444), fi.Mode().Perm(), "a new etc/machine-id is read-only")
	assert.Equal(t, string(rel), readFile(t, inRoot(root, layout.ReleaseFile)))
	assert.Equal(t, "fb", readFile(t, filepath.Join(root, "usr/bin/firstboot")))
	// systemd's update stamps, for /usr's time (the epoch's): its
	// ConditionNeedsUpdate= units skip the first boot.
	for _, dir := range []string{"etc", "var"} {
		assert.Contains(t, readFile(t, filepath.Join(root, dir, ".updated")), "\nTIMESTAMP_NSEC=1767225600000000000\n", dir)
	}
	for _, p := range []string{layout.UpgradeKeysFile, BundlePath} {
		_, err := os.Lstat(inRoot(root, p))
		assert.ErrorIs(t, err, fs.ErrNotExist, "%s written without its input", p)
	}
	// The index, written last, lists the tree as it is but itself.
	ix, err := slotindex.Load(inRoot(root, layout.SlotIndexFile))
	require.NoError(t, err)
	again, err := slotindex.Build(context.Background(), root, layout.SlotIndexFile)
	require.NoError(t, err)
	assert.Empty(t, slotindex.Diff(ix, again))
	listed := map[string]bool{}
	for _, e := range ix.Entries {
		listed[e.Path] = true
	}
	assert.True(t, listed["/usr/bin/firstboot"])
	assert.True(t, listed[layout.ReleaseFile])
	assert.True(t, listed["/etc/.updated"])
	assert.False(t, listed[layout.SlotIndexFile])
	fi, err = os.Stat(inRoot(root, layout.StateMount))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	// Directories absent from the base still become links into var.
	for from, to := range movedToVar {
		fi, err := os.Stat(filepath.Join(root, from))
		require.NoError(t, err, from)
		assert.True(t, fi.IsDir(), from)
		link, err := os.Readlink(filepath.Join(root, from))
		require.NoError(t, err, "%s is not a symlink", from)
		assert.Equal(t, to, filepath.Join(filepath.Dir(from), link))
	}
}

func TestMoveToVarMergesIntoExistingVar(t *testing.T) {
	root := writeFiles(t, t.TempDir(), map[string]string{
		"home/bob/.bashrc":  "bob",
		"var/home/carol/x":  "carol",
		"opt/app/bin/app":   "app",
		"usr/bin/something": "s",
	})
	r, err := os.OpenRoot(root)
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, moveToVar(r))
	for p, want := range map[string]string{
		"var/home/bob/.bashrc": "bob",
		"var/home/carol/x":     "carol",
		"var/opt/app/bin/app":  "app",
		"home/bob/.bashrc":     "bob",
		"opt/app/bin/app":      "app",
	} {
		assert.Equal(t, want, readFile(t, filepath.Join(root, p)), p)
	}
	link, err := os.Readlink(filepath.Join(root, "usr/local"))
	require.NoError(t, err)
	assert.Equal(t, "../var/usrlocal", link)
}

// TestBuildSlotNeverWritesThroughLinks: a base's absolute links point at
// the build host. An overlay file or a program whose path is such a link
// replaces the link in the image; the host's file is left alone. A
// program whose path is a file of another mode gets its own mode.
func TestBuildSlotNeverWritesThroughLinks(t *testing.T) {
	requireSlotTools(t)
	host := writeFiles(t, t.TempDir(), map[string]string{"zoneinfo-UTC": "host zone\n", "tool": "host tool\n"})
	tree := append(slotTree(),
		tSymlink("etc/localtime", filepath.Join(host, "zoneinfo-UTC")),
		tSymlink("usr/bin/kubelet", filepath.Join(host, "tool")),
		tFile("usr/bin/kubeadm", "old kubeadm, not executable"),
	)
	in := slotInputs(t, fakeBase(t, "base-links", tree))
	require.NoError(t, os.WriteFile(filepath.Join(in.Overlay, "etc/localtime"), []byte("overlay zone\n"), 0o644))
	kubeadm := filepath.Join(t.TempDir(), "kubeadm")
	require.NoError(t, os.WriteFile(kubeadm, []byte("kubeadm binary"), 0o644))
	in.Programs = append(in.Programs, Program{Src: kubeadm, Dest: "usr/bin/kubeadm", Key: "kubeadm-key"})
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)

	image, _, err := BuildSlot(context.Background(), c, in, epoch, discard)
	require.NoError(t, err)
	assert.Equal(t, "host zone\n", readFile(t, filepath.Join(host, "zoneinfo-UTC")), "the build host's file is unchanged")
	assert.Equal(t, "host tool\n", readFile(t, filepath.Join(host, "tool")), "the build host's file is unchanged")
	root := unsquash(t, image)
	for name, want := range map[string]string{
		"etc/localtime": "overlay zone\n", "usr/bin/kubelet": "kubelet binary", "usr/bin/kubeadm": "kubeadm binary",
	} {
		fi, err := os.Lstat(inRoot(root, name))
		require.NoError(t, err)
		assert.True(t, fi.Mode().IsRegular(), "%s is a file in the image, not a link", name)
		assert.Equal(t, want, readFile(t, inRoot(root, name)), name)
	}
	fi, err := os.Stat(inRoot(root, "usr/bin/kubeadm"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "a program replacing a 0644 file is executable")
}

// TestBuildSlotRefusesOverlayUnderVar: /opt, /home, /usr/local ... are
// links into /var on the appliance, whose STATE hides the image's copy:
// an overlay with files there is refused by name.
func TestBuildSlotRefusesOverlayUnderVar(t *testing.T) {
	requireSlotTools(t)
	for _, dir := range []string{"opt", "usr/local", "home"} {
		t.Run(dir, func(t *testing.T) {
			in := slotInputs(t, fakeBase(t, "base-"+dir, slotTree()))
			writeFiles(t, in.Overlay, map[string]string{dir + "/app/run": "app"})
			c, err := cache.New(t.TempDir())
			require.NoError(t, err)
			_, _, err = BuildSlot(context.Background(), c, in, epoch, discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "/"+dir+" is a link into /var on the appliance")
			assert.Contains(t, err.Error(), "put these files under /usr or /etc")
		})
	}
}

// TestBuildSlotOverlayModes: the image's modes are what git records, not
// what the checkout's umask made: a new directory 0755, a file 0644, or
// 0755 when executable; a directory the base has keeps its mode.
func TestBuildSlotOverlayModes(t *testing.T) {
	requireSlotTools(t)
	in := slotInputs(t, fakeBase(t, "base-modes", append(slotTree(), entry{name: "etc/private/", mode: 0o700})))
	files := writeFiles(t, in.Overlay, map[string]string{"etc/app/conf": "c", "usr/lib/app/run": "r", "etc/private/x": "x"})
	require.NoError(t, os.Chmod(filepath.Join(files, "etc/app"), 0o775))
	require.NoError(t, os.Chmod(filepath.Join(files, "etc/app/conf"), 0o664))
	require.NoError(t, os.Chmod(filepath.Join(files, "usr/lib/app/run"), 0o775))
	require.NoError(t, os.Chmod(filepath.Join(files, "etc/private"), 0o777))
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	image, _, err := BuildSlot(context.Background(), c, in, epoch, discard)
	require.NoError(t, err)
	root := unsquash(t, image)
	for name, want := range map[string]os.FileMode{
		"etc/app": 0o755, "etc/app/conf": 0o644, "usr/lib/app/run": 0o755, "etc/private": 0o700,
	} {
		fi, err := os.Stat(inRoot(root, name))
		require.NoError(t, err)
		assert.Equal(t, want, fi.Mode().Perm(), name)
	}
}

// TestBuildSlotOverlayThroughALink: an overlay given as a symbolic link to
// a directory (a spec tree linking to a shared overlay) is that
// directory's files, and a change behind the link is a new slot.
func TestBuildSlotOverlayThroughALink(t *testing.T) {
	requireSlotTools(t)
	in := slotInputs(t, fakeBase(t, "base-overlay-link", slotTree()))
	link := filepath.Join(t.TempDir(), "overlay")
	require.NoError(t, os.Symlink(in.Overlay, link))
	target := in.Overlay
	in.Overlay = link
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)

	image, _, err := BuildSlot(context.Background(), c, in, epoch, discard)
	require.NoError(t, err)
	assert.Equal(t, "from the overlay\n", readFile(t, inRoot(unsquash(t, image), "etc/terrarium/overlay.txt")))

	writeFiles(t, target, map[string]string{"etc/terrarium/overlay.txt": "changed behind the link\n"})
	image, _, err = BuildSlot(context.Background(), c, in, epoch, discard)
	require.NoError(t, err)
	assert.Equal(t, "changed behind the link\n", readFile(t, inRoot(unsquash(t, image), "etc/terrarium/overlay.txt")))
}
