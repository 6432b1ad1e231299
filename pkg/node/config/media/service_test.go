package media

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// fakeStick stands in for the kernel's side of the stick service: a
// directory for the mount, and a record of what was asked.
type fakeStick struct {
	dir        string
	mountErr   error
	releaseErr error

	mu       sync.Mutex
	mounted  []string // "device label access"
	released int
}

func (f *fakeStick) mount(dev string, m Medium, dir string, a Access) (Filesystem, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounted = append(f.mounted, fmt.Sprintf("%s %s %s", dev, m.Label, a))
	if f.mountErr != nil {
		return Unknown, f.mountErr
	}
	return VFAT, nil
}

func (f *fakeStick) release(string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	return f.releaseErr
}

// listen starts the stick service on a socket under h's root, as
// terrarium-stick.socket does (one instance per connection), with f's
// mount, until the test ends.
func (f *fakeStick) listen(t *testing.T, h *host.Host, sock string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(h.Path(sock)), 0o700))
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: h.Path(sock), Net: "unixpacket"})
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.AcceptUnix()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				s := &StickService{Dir: f.dir, mount: f.mount, release: f.release}
				_ = s.Serve(context.Background(), conn) // what it returns, the asker was told
			}()
		}
	}()
}

// stickHost is a host whose stick service is f, its mount a directory.
func stickHost(t *testing.T, f *fakeStick) *Block {
	t.Helper()
	h := &host.Host{Root: t.TempDir()}
	f.dir = filepath.Join(t.TempDir(), "mnt")
	f.listen(t, h, "/run/terrarium/stick.sock")
	return &Block{Host: h, Dir: "/run/terrarium/media", Service: "/run/terrarium/stick.sock"}
}

var supportStick = Medium{Device: "/dev/sdb1", Label: "TERRA-SUPPORT"}

// TestServiceMountsWhatTheJobWrites: a job that writes gets the service's
// mount, writes through it (files, a directory, a rename), and the stick
// is released after the job, with nothing of it left open or linked.
func TestServiceMountsWhatTheJobWrites(t *testing.T) {
	f := &fakeStick{}
	b := stickHost(t, f)
	var linked string
	err := b.Use(context.Background(), supportStick, true, func(dir string) error {
		assert.Equal(t, "/run/terrarium/media/sdb1", dir)
		linked = b.Host.Path(dir)
		p := filepath.Join(b.Host.Path(dir), "bundle.tar.gz")
		if err := os.WriteFile(p+".part", []byte("bundle"), 0o600); err != nil {
			return err
		}
		if err := os.Rename(p+".part", p); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(b.Host.Path(dir), "audit"), 0o700); err != nil {
			return err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		assert.Zero(t, f.released, "released while the job ran")
		return nil
	})
	require.NoError(t, err)

	got, err := os.ReadFile(filepath.Join(f.dir, "bundle.tar.gz"))
	require.NoError(t, err)
	assert.Equal(t, "bundle", string(got))
	assert.DirExists(t, filepath.Join(f.dir, "audit"))
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, []string{"/dev/sdb1 TERRA-SUPPORT writes"}, f.mounted)
	assert.Equal(t, 1, f.released)
	assert.NoFileExists(t, linked, "the link to the mount outlived the job")
	_, err = os.Lstat(linked)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestServiceReleasesAfterAFailedJob: the job's error is Use's, and the
// stick is released all the same.
func TestServiceReleasesAfterAFailedJob(t *testing.T) {
	f := &fakeStick{}
	b := stickHost(t, f)
	boom := errors.New("the etcd snapshot failed")
	err := b.Use(context.Background(), supportStick, true, func(string) error { return boom })
	require.ErrorIs(t, err, boom)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, 1, f.released)
}

// TestServiceRefusals: what the service refuses reaches the job's caller
// as the policy's own errors, with their text, and the job never runs.
func TestServiceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mountErr error
		is       error
		text     string
	}{
		{
			name:     "ext4",
			mountErr: &RefusedError{Medium: supportStick, Found: Ext4, Access: Write},
			is:       ErrFilesystemRefused,
			text:     "the stick /dev/sdb1 (TERRA-SUPPORT) holds an ext4 filesystem; the node writes only FAT or exFAT sticks",
		},
		{
			name:     "no filesystem",
			mountErr: &RefusedError{Medium: supportStick, Found: Unknown, Access: Write},
			is:       ErrFilesystemRefused,
			text:     "holds no filesystem the node knows",
		},
		{
			name:     "write-protected",
			mountErr: fmt.Errorf("mount /dev/sdb1 (TERRA-SUPPORT): %w", ErrWriteProtected),
			is:       ErrWriteProtected,
			text:     "mount /dev/sdb1 (TERRA-SUPPORT): the medium is write-protected",
		},
		{
			name:     "other",
			mountErr: errors.New("mount /dev/sdb1 (TERRA-SUPPORT) as vfat: invalid argument"),
			text:     "the stick /dev/sdb1 (TERRA-SUPPORT): the stick service: mount /dev/sdb1 (TERRA-SUPPORT) as vfat: invalid argument",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeStick{mountErr: tc.mountErr}
			b := stickHost(t, f)
			ran := false
			err := b.Use(context.Background(), supportStick, true, func(string) error {
				ran = true
				return nil
			})
			require.Error(t, err)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
			assert.ErrorContains(t, err, tc.text)
			assert.False(t, ran, "the job ran on a stick that was not mounted")
			f.mu.Lock()
			defer f.mu.Unlock()
			assert.Zero(t, f.released, "released what was never mounted")
		})
	}
}

// TestServiceReleaseFails: a stick the service could not sync or unmount
// is the job's error, named.
func TestServiceReleaseFails(t *testing.T) {
	f := &fakeStick{releaseErr: errors.New("syncfs /mnt: input/output error")}
	b := stickHost(t, f)
	err := b.Use(context.Background(), supportStick, true, func(string) error { return nil })
	assert.EqualError(t, err, "the stick /dev/sdb1 (TERRA-SUPPORT): sync and unmount: syncfs /mnt: input/output error")
}

// TestServiceNotListening: no stick service is said with where to look.
func TestServiceNotListening(t *testing.T) {
	b := &Block{Host: &host.Host{Root: t.TempDir()}, Dir: "/run/terrarium/media", Service: "/run/terrarium/stick.sock"}
	err := b.Use(context.Background(), supportStick, true, func(string) error {
		t.Error("the job ran without a stick")
		return nil
	})
	assert.ErrorContains(t, err, "the stick /dev/sdb1 (TERRA-SUPPORT): reach the stick service at /run/terrarium/stick.sock (systemctl status terrarium-stick.socket)")
}

// TestServiceGoneWithoutAnAnswer: a service instance that dies after the
// request, before it answers, is an error that says where its log is.
func TestServiceGoneWithoutAnAnswer(t *testing.T) {
	h := &host.Host{Root: t.TempDir()}
	require.NoError(t, os.MkdirAll(h.Path("/run/terrarium"), 0o700))
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: h.Path("/run/terrarium/stick.sock"), Net: "unixpacket"})
	require.NoError(t, err)
	defer l.Close()
	go func() {
		conn, err := l.AcceptUnix()
		if err == nil {
			_, _, _, _, _ = conn.ReadMsgUnix(make([]byte, maxMessage), nil) // the request, then gone
			_ = conn.Close()
		}
	}()
	b := &Block{Host: h, Dir: "/run/terrarium/media", Service: "/run/terrarium/stick.sock"}
	err = b.Use(context.Background(), supportStick, true, func(string) error {
		t.Error("the job ran without a stick")
		return nil
	})
	assert.ErrorContains(t, err, "no answer from the stick service (journalctl -u 'terrarium-stick@*')")
}

// TestServiceReleasesWhenTheAskerIsGone: an asker that goes away while it
// holds the stick (firstboot killed) leaves it released.
func TestServiceReleasesWhenTheAskerIsGone(t *testing.T) {
	f := &fakeStick{dir: t.TempDir()}
	ours, theirs := packetPair(t)
	done := make(chan error, 1)
	go func() {
		done <- (&StickService{Dir: f.dir, mount: f.mount, release: f.release}).Serve(context.Background(), theirs)
	}()
	require.NoError(t, send(ours, request{Device: "/dev/sdb1", Label: "TERRA-BACKUP", Access: Write}, nil))
	ans, root, err := receive(ours)
	require.NoError(t, err)
	require.NotNil(t, root)
	assert.Equal(t, VFAT, ans.Filesystem)
	require.NoError(t, root.Close())
	require.NoError(t, ours.Close())
	require.NoError(t, <-done)
	assert.Equal(t, 1, f.released)
}

// TestServiceRefusesRequests: the service mounts only a device under
// /dev, named cleanly, for a read or a write; anything else is refused
// with nothing mounted.
func TestServiceRefusesRequests(t *testing.T) {
	for _, tc := range []struct {
		req  string
		text string
	}{
		{`{"device":"/etc/shadow","label":"TERRA-SUPPORT","access":"write"}`, `the device "/etc/shadow" is not a path under /dev`},
		{`{"device":"/dev/../etc/shadow","label":"TERRA-SUPPORT","access":"write"}`, `is not a path under /dev`},
		{`{"device":"sdb1","label":"TERRA-SUPPORT","access":"write"}`, `is not a path under /dev`},
		{`{"device":"/dev/sdb1","label":"","access":"write"}`, `no label for /dev/sdb1`},
		{`{"device":"/dev/sdb1","label":"TERRA-SUPPORT","access":"exec"}`, `the access "exec" is neither read nor write`},
		{`not json`, `a request that is not one`},
	} {
		t.Run(tc.req, func(t *testing.T) {
			f := &fakeStick{dir: t.TempDir()}
			ours, theirs := packetPair(t)
			done := make(chan error, 1)
			go func() {
				done <- (&StickService{Dir: f.dir, mount: f.mount, release: f.release}).Serve(context.Background(), theirs)
			}()
			_, _, err := ours.WriteMsgUnix([]byte(tc.req), nil, nil)
			require.NoError(t, err)
			ans, root, err := receive(ours)
			require.NoError(t, err)
			assert.Nil(t, root)
			assert.Contains(t, ans.Error, tc.text)
			assert.ErrorContains(t, <-done, tc.text)
			assert.Empty(t, f.mounted)
		})
	}
}

// TestMountBlockRefusesAFile: the service mounts block devices only.
func TestMountBlockRefusesAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sdb1")
	require.NoError(t, os.WriteFile(p, make([]byte, 4096), 0o600))
	_, err := mountBlock(p, supportStick, t.TempDir(), Write)
	assert.EqualError(t, err, "the stick /dev/sdb1 (TERRA-SUPPORT) is not a block device")
}

// packetPair is a connected pair of SOCK_SEQPACKET sockets.
func packetPair(t *testing.T) (ours, theirs *net.UnixConn) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	require.NoError(t, err)
	defer l.Close()
	ours, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	require.NoError(t, err)
	theirs, err = l.AcceptUnix()
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = ours.Close()
		_ = theirs.Close()
	})
	return ours, theirs
}

// TestServiceReleaseOutlivesCancel: a job that ends as its context is
// cancelled still hears that its stick was released.
func TestServiceReleaseOutlivesCancel(t *testing.T) {
	f := &fakeStick{}
	b := stickHost(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := b.Use(ctx, supportStick, true, func(string) error {
		cancel()
		return nil
	})
	require.NoError(t, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, 1, f.released)
}

// TestUseReadsPastALeftLink: a link a written stick's job left behind
// (firstboot died in it) does not stop a later read of a stick with that
// device name: it is replaced by the mount point.
func TestUseReadsPastALeftLink(t *testing.T) {
	h := &host.Host{Root: t.TempDir()}
	b := &Block{Host: h, Dir: "/run/terrarium/media", Service: "/run/terrarium/stick.sock"}
	require.NoError(t, os.MkdirAll(h.Path("/dev"), 0o755))
	require.NoError(t, os.WriteFile(h.Path("/dev/sdb1"), extSuperblock(extCompatHasJournal, extIncompatExtents), 0o600))
	require.NoError(t, os.MkdirAll(h.Path("/run/terrarium/media"), 0o700))
	require.NoError(t, os.Symlink("/proc/999999/fd/7", h.Path("/run/terrarium/media/sdb1")))
	err := b.Use(context.Background(), Medium{Device: "/dev/sdb1", Label: "TERRA-UPGRADE"}, false, func(string) error { return nil })
	require.ErrorIs(t, err, ErrFilesystemRefused, "the read went as far as the stick's filesystem")
	assert.DirExists(t, h.Path("/run/terrarium/media/sdb1"))
}
