package media

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The stick service (terrarium-stick@.service, started for each
// connection to layout.StickSocket) mounts the sticks the node writes to,
// so that firstboot never mounts them itself. Each connection is one
// stick for one job, in SOCK_SEQPACKET messages:
//
//	firstboot → service: a request (which device, its label, the access)
//	service → firstboot: an answer: the filesystem mounted, with the
//	                     mount's root directory as an SCM_RIGHTS file
//	                     descriptor, or why nothing was mounted
//	firstboot → service: release (or the connection closed: firstboot
//	                     went away)
//	service → firstboot: whether the stick was synced and unmounted
//
// The service runs with only CAP_SYS_ADMIN, no network, block disks as
// its only devices and a mount namespace of its own (the unit's
// sandbox): the mount is in no mount table of the host, and ends with
// the service's instance. firstboot reaches the stick's files only
// through the directory it was handed (and a link to it while its job
// runs).

// request is what firstboot asks the stick service for.
type request struct {
	Device string `json:"device"`
	Label  string `json:"label"`
	Access Access `json:"access"`
}

// answer is the stick service's reply to a request (Filesystem, the
// mount's root passed beside it) or to a release (Released).
type answer struct {
	Filesystem Filesystem `json:"filesystem,omitempty"`
	Released   bool       `json:"released,omitempty"`
	// Error says why not. Refused (with Found) and WriteProtected carry
	// the policy's answers, so that the asker's error is the same as if
	// it had mounted the stick itself.
	Error          string     `json:"error,omitempty"`
	Refused        bool       `json:"refused,omitempty"`
	Found          Filesystem `json:"found,omitempty"`
	WriteProtected bool       `json:"writeProtected,omitempty"`
}

// releaseMessage asks the service to sync and unmount the stick.
const releaseMessage = "release"

// maxMessage bounds a message either way.
const maxMessage = 64 << 10

// answerTo is the answer that carries err, a failed mount.
func answerTo(err error) answer {
	a := answer{Error: err.Error()}
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		a.Refused, a.Found = true, refused.Found
	case errors.Is(err, ErrWriteProtected):
		a.WriteProtected = true
	}
	return a
}

// err is the asker's error for an answer that mounted nothing: the
// policy's own errors where the service gave them.
func (a answer) err(m Medium, acc Access) error {
	switch {
	case a.Refused:
		return &RefusedError{Medium: m, Found: a.Found, Access: acc}
	case a.WriteProtected:
		return fmt.Errorf("mount %s (%s): %w", m.Device, m.Label, ErrWriteProtected)
	}
	return fmt.Errorf("the stick %s (%s): the stick service: %s", m.Device, m.Label, a.Error)
}

// StickService serves one connection to the stick service: it mounts the
// medium asked for (Mount, the policy of Allowed) on Dir, hands the
// mount's root directory to the asker, and syncs and unmounts it when the
// asker releases it or goes away.
type StickService struct {
	// Dir is the mount point, in the service's own mount namespace.
	Dir string

	// mount and release are Mount and release; tests swap them.
	mount   func(dev string, m Medium, dir string, a Access) (Filesystem, error)
	release func(dir string) error
}

// Serve answers the one request on conn. Its error is what went wrong,
// for the service's journal; the asker has been told.
func (s *StickService) Serve(ctx context.Context, conn *net.UnixConn) error {
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() }) // a stopped service ends its connection
	defer stop()
	buf := make([]byte, maxMessage)
	n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
	if err != nil {
		return fmt.Errorf("read the request: %w", err)
	}
	req, err := parseRequest(buf[:n])
	if err != nil {
		return s.refuse(conn, err)
	}
	m := Medium{Device: req.Device, Label: req.Label}
	mount := s.mount
	if mount == nil {
		mount = mountBlock
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return s.refuse(conn, err)
	}
	fs, err := mount(req.Device, m, s.Dir, req.Access)
	if err != nil {
		return s.refuse(conn, err)
	}
	rel := s.release
	if rel == nil {
		rel = release
	}
	if err := s.hand(conn, fs); err != nil {
		return errors.Join(err, rel(s.Dir))
	}
	// Until firstboot releases the stick, or is gone.
	_, _, _, _, _ = conn.ReadMsgUnix(buf, nil)
	rerr := rel(s.Dir)
	done := answer{Released: rerr == nil}
	if rerr != nil {
		done.Error = rerr.Error()
	}
	_ = send(conn, done, nil) // firstboot may be gone; the stick is released either way
	return rerr
}

// hand sends the answer for a mounted fs with the mount's root directory.
func (s *StickService) hand(conn *net.UnixConn, fs Filesystem) error {
	root, err := os.Open(s.Dir)
	if err != nil {
		return errors.Join(fmt.Errorf("open the mount: %w", err), send(conn, answerTo(err), nil))
	}
	defer root.Close() // handed on; the asker holds its own copy
	return send(conn, answer{Filesystem: fs}, unix.UnixRights(int(root.Fd())))
}

// refuse tells the asker err, and returns it.
func (s *StickService) refuse(conn *net.UnixConn, err error) error {
	return errors.Join(err, send(conn, answerTo(err), nil))
}

// parseRequest reads a request as the service receives it and refuses
// what checkRequest refuses.
func parseRequest(b []byte) (request, error) {
	var req request
	if err := json.Unmarshal(b, &req); err != nil {
		return request{}, fmt.Errorf("a request that is not one: %w", err)
	}
	if err := checkRequest(req); err != nil {
		return request{}, err
	}
	return req, nil
}

// checkRequest refuses what is not a medium's block device by its path
// (mountBlock checks that it is one); the access was checked as it was
// read (Access.UnmarshalText).
func checkRequest(r request) error {
	if r.Device == "" || r.Device != filepath.Clean(r.Device) || !strings.HasPrefix(r.Device, "/dev/") {
		return fmt.Errorf("the device %q is not a path under /dev", r.Device)
	}
	if r.Label == "" {
		return fmt.Errorf("no label for %s", r.Device)
	}
	return nil
}

// mountBlock mounts dev as Mount does, if it is a block device.
func mountBlock(dev string, m Medium, dir string, a Access) (Filesystem, error) {
	fi, err := os.Stat(dev)
	if err != nil {
		return Unknown, fmt.Errorf("the stick %s (%s): %w", m.Device, m.Label, err)
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return Unknown, fmt.Errorf("the stick %s (%s) is not a block device", m.Device, m.Label)
	}
	return Mount(dev, m, dir, a)
}

// send writes one message: v as JSON, with oob beside it.
func send(conn *net.UnixConn, v any, oob []byte) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, _, err = conn.WriteMsgUnix(b, oob, nil)
	return err
}
