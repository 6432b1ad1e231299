package media

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// useService has the stick service mount m for fn (Block.Service): fn
// gets a link under Dir to the mount's root, which the service handed
// over as an open directory (/proc/<pid>/fd/<n>: this process's and, as
// root, its children's way into a mount the host never shows). After fn,
// whatever it did, the link and the directory are closed and the service
// syncs and unmounts the stick.
func (b *Block) useService(ctx context.Context, m Medium, a Access, fn func(dir string) error) (ferr error) {
	sock := b.Host.Path(b.Service)
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("the stick %s (%s): reach the stick service at %s (systemctl status terrarium-stick.socket): %w", m.Device, m.Label, b.Service, err)
	}
	defer conn.Close()
	// A cancelled job stops waiting for the service (the service releases
	// the stick when the connection closes), but not for the release.
	var (
		mu        sync.Mutex
		releasing bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !releasing {
			_ = conn.SetDeadline(time.Unix(1, 0))
		}
	})
	defer stop()

	if err := send(conn, request{Device: m.Device, Label: m.Label, Access: a}, nil); err != nil {
		return fmt.Errorf("the stick %s (%s): ask the stick service (journalctl -u 'terrarium-stick@*'): %w", m.Device, m.Label, err)
	}
	ans, root, err := receive(conn)
	if err != nil {
		return fmt.Errorf("the stick %s (%s): no answer from the stick service (journalctl -u 'terrarium-stick@*'): %w", m.Device, m.Label, errors.Join(ctx.Err(), err))
	}
	if root == nil {
		if ans.Error == "" {
			ans.Error = "it mounted the stick but handed over no directory"
		}
		return ans.err(m, a)
	}
	dir := filepath.Join(b.Dir, filepath.Base(m.Device))
	link := b.Host.Path(dir)
	defer func() {
		_ = os.Remove(link) // a link to a closed descriptor leads nowhere
		_ = root.Close()    // before the service unmounts
		// A job that ended as ctx was cancelled still hears that its
		// stick was synced and unmounted, within a bound.
		mu.Lock()
		releasing = true
		_ = conn.SetDeadline(time.Now().Add(releaseWait))
		mu.Unlock()
		if err := releaseBy(conn, m); err != nil && ferr == nil {
			ferr = err
		}
	}()
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		return err
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Symlink(fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), root.Fd()), link); err != nil {
		return err
	}
	return fn(dir)
}

// releaseWait bounds the wait for the service to sync and unmount a
// stick after its job: what the job wrote is on its way to the stick
// already (the writers sync their files).
const releaseWait = 2 * time.Minute

// releaseBy asks the service to sync and unmount m's stick and waits
// until it has.
func releaseBy(conn *net.UnixConn, m Medium) error {
	if _, _, err := conn.WriteMsgUnix([]byte(releaseMessage), nil, nil); err != nil {
		return fmt.Errorf("the stick %s (%s): ask the stick service to release it: %w", m.Device, m.Label, err)
	}
	ans, extra, err := receive(conn)
	if extra != nil {
		_ = extra.Close() // none is expected with a release
	}
	switch {
	case err != nil:
		return fmt.Errorf("the stick %s (%s): no word from the stick service that it was synced and unmounted (journalctl -u 'terrarium-stick@*'): %w", m.Device, m.Label, err)
	case !ans.Released:
		return fmt.Errorf("the stick %s (%s): sync and unmount: %s", m.Device, m.Label, ans.Error)
	}
	return nil
}

// receive reads one answer and the directory passed beside it, if any.
func receive(conn *net.UnixConn) (answer, *os.File, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	var root *os.File
	if oobn > 0 {
		fds, perr := passed(oob[:oobn])
		for i, fd := range fds {
			if i == 0 && err == nil && perr == nil {
				root = os.NewFile(uintptr(fd), "stick")
				continue
			}
			_ = unix.Close(fd) // one directory is handed over, no more
		}
		if err == nil {
			err = perr
		}
	}
	if err != nil {
		if root != nil {
			_ = root.Close()
		}
		return answer{}, nil, err
	}
	var ans answer
	if err := json.Unmarshal(buf[:n], &ans); err != nil {
		if root != nil {
			_ = root.Close()
		}
		return answer{}, nil, fmt.Errorf("an answer that is not one: %w", err)
	}
	return ans, root, nil
}

// passed are the file descriptors in a message's control data.
func passed(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		fds = append(fds, f...)
	}
	return fds, nil
}
