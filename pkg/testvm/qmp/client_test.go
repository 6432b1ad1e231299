package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const greeting = `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18"}, "capabilities": ["oob"]}}`

// fakeServer is a scripted QMP server on a unix socket. handle is called for
// every command after qmp_capabilities and writes whatever it wants.
type fakeServer struct {
	t      *testing.T
	path   string
	ln     net.Listener
	handle func(w *fakeConn, cmd string, args json.RawMessage, id json.RawMessage)
	// before is sent ahead of the greeting, one line each.
	before []string
	// noGreeting leaves the greeting out.
	noGreeting bool
	wg         sync.WaitGroup
}

type fakeConn struct {
	mu   sync.Mutex
	conn net.Conn
}

func (f *fakeConn) send(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.conn, format+"\r\n", a...)
}

func (f *fakeConn) event(name, data string) {
	f.send(`{"timestamp": {"seconds": 1700000000, "microseconds": 5}, "event": %q, "data": %s}`, name, data)
}

func newFakeServer(t *testing.T, handle func(w *fakeConn, cmd string, args, id json.RawMessage)) *fakeServer {
	t.Helper()
	s := &fakeServer{t: t, path: filepath.Join(t.TempDir(), "qmp.sock"), handle: handle}
	s.listen()
	return s
}

func (s *fakeServer) listen() {
	ln, err := net.Listen("unix", s.path)
	require.NoError(s.t, err, "listen")
	s.ln = ln
	// Registered before any client can connect, so that it runs after
	// the clients' own cleanups have closed them.
	s.t.Cleanup(func() {
		assert.NoError(s.t, ln.Close(), "close the fake server")
		s.wg.Wait()
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(conn)
			}()
		}
	}()
}

func (s *fakeServer) serve(conn net.Conn) {
	defer conn.Close()
	w := &fakeConn{conn: conn}
	for _, line := range s.before {
		w.send("%s", line)
	}
	if !s.noGreeting {
		w.send("%s", greeting)
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		var req struct {
			Execute   string          `json:"execute"`
			Arguments json.RawMessage `json:"arguments"`
			ID        json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			assert.NoError(s.t, err, "fake server: bad request %q", sc.Text())
			return
		}
		if req.Execute == "qmp_capabilities" {
			w.send(`{"return": {}, "id": %s}`, req.ID)
			continue
		}
		if req.Execute == "drop" {
			return
		}
		s.handle(w, req.Execute, req.Arguments, req.ID)
	}
}

func dial(t *testing.T, s *fakeServer, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.path, opts...)
	require.NoError(t, err, "Dial")
	t.Cleanup(func() { assert.NoError(t, c.Close(), "Close") })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func echoHandler(w *fakeConn, cmd string, args, id json.RawMessage) {
	switch cmd {
	case "query-status":
		w.event("RESUME", `{}`)
		w.send(`{"return": {"status": "running", "running": true}, "id": %s}`, id)
	case "echo":
		w.send(`{"return": %s, "id": %s}`, args, id)
	case "slow": // replies out of order
		go func() {
			time.Sleep(100 * time.Millisecond)
			w.send(`{"return": %s, "id": %s}`, args, id)
		}()
	case "hang":
	default:
		w.send(`{"error": {"class": "CommandNotFound", "desc": "The command %s has not been found"}, "id": %s}`, cmd, id)
	}
}

func TestDialGreeting(t *testing.T) {
	s := newFakeServer(t, echoHandler)
	c := dial(t, s)
	g := c.Greeting()
	assert.Equal(t, "7.2.22Debian 1:7.2+dfsg-7+deb12u18", g.Version.String())
	assert.Equal(t, []string{"oob"}, g.Capabilities)
}

// QEMU can send an event before the greeting when the event is emitted
// before its monitor has handled the new connection. Dial must keep the
// event and still see the greeting.
func TestDialEventBeforeGreeting(t *testing.T) {
	s := &fakeServer{t: t, path: filepath.Join(t.TempDir(), "qmp.sock"), handle: echoHandler,
		before: []string{`{"timestamp": {"seconds": 1700000000, "microseconds": 5}, "event": "NIC_RX_FILTER_CHANGED", "data": {"path": "/machine/peripheral/net0/virtio-backend"}}`}}
	s.listen()
	c := dial(t, s)
	assert.Equal(t, 7, c.Greeting().Version.Major)
	ev, err := c.WaitEvent(testCtx(t), "NIC_RX_FILTER_CHANGED")
	require.NoError(t, err, "the event sent before the greeting")
	assert.JSONEq(t, `{"path": "/machine/peripheral/net0/virtio-backend"}`, string(ev.Data))
	require.NoError(t, c.Execute(testCtx(t), "echo", map[string]int{"a": 1}, nil), "a command after it")
}

func TestDialNotAGreeting(t *testing.T) {
	event := `{"event": "RESUME", "data": {}}`
	tests := []struct {
		name   string
		before []string
		want   string
	}{
		{name: "a reply", before: []string{`{"return": {}, "id": 1}`}, want: `first message is not a QMP greeting: {"return": {}, "id": 1}`},
		{name: "not an object", before: []string{`[1, 2]`}, want: "first message [1, 2]"},
		{name: "only events", before: slices.Repeat([]string{event}, maxBeforeGreeting+1), want: "no QMP greeting after 64 events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &fakeServer{t: t, path: filepath.Join(t.TempDir(), "qmp.sock"), handle: echoHandler,
				before: tt.before, noGreeting: true}
			s.listen()
			_, err := Dial(testCtx(t), s.path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), s.path, "the error names the socket")
		})
	}
}

func TestDialRetriesUntilSocketExists(t *testing.T) {
	s := &fakeServer{t: t, path: filepath.Join(t.TempDir(), "late.sock"), handle: echoHandler}
	time.AfterFunc(200*time.Millisecond, s.listen)
	c := dial(t, s, WithRetryInterval(10*time.Millisecond))
	require.NoError(t, c.Execute(testCtx(t), "echo", map[string]int{"a": 1}, nil))
}

func TestDialTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, filepath.Join(t.TempDir(), "missing.sock"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestDialBadOption(t *testing.T) {
	_, err := Dial(context.Background(), "x", WithEventBacklog(0))
	assert.ErrorContains(t, err, "event backlog 0")
}

func TestExecute(t *testing.T) {
	s := newFakeServer(t, echoHandler)
	c := dial(t, s)
	tests := []struct {
		name      string
		cmd       string
		args      any
		want      string
		wantClass string
	}{
		{name: "return with interleaved event", cmd: "query-status", want: `{"running":true,"status":"running"}`},
		{name: "arguments round trip", cmd: "echo", args: map[string]string{"id": "disk0"}, want: `{"id":"disk0"}`},
		{name: "error reply", cmd: "nonsense", wantClass: "CommandNotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got map[string]any
			err := c.Execute(testCtx(t), tt.cmd, tt.args, &got)
			if tt.wantClass != "" {
				var qe *Error
				require.ErrorAs(t, err, &qe)
				assert.Equal(t, tt.wantClass, qe.Class)
				assert.Contains(t, err.Error(), "qmp "+tt.cmd, "the error names the command")
				return
			}
			require.NoError(t, err, "Execute")
			b, err := json.Marshal(got)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(b))
		})
	}
}

func TestExecuteConcurrent(t *testing.T) {
	s := newFakeServer(t, echoHandler)
	c := dial(t, s)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			cmd := "echo"
			if i%5 == 0 {
				cmd = "slow"
			}
			var got struct{ N int }
			if err := c.Execute(ctx, cmd, map[string]int{"N": i}, &got); err != nil {
				errs <- err
				return
			}
			if got.N != i {
				errs <- fmt.Errorf("call %d got reply %d", i, got.N)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}
