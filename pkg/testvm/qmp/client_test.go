package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const greeting = `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18"}, "capabilities": ["oob"]}}`

// fakeServer is a scripted QMP server on a unix socket. handle is called for
// every command after qmp_capabilities and writes whatever it wants.
type fakeServer struct {
	t      *testing.T
	path   string
	ln     net.Listener
	handle func(w *fakeConn, cmd string, args json.RawMessage, id json.RawMessage)
	wg     sync.WaitGroup
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
	if err != nil {
		s.t.Fatalf("listen: %v", err)
	}
	s.ln = ln
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
	s.t.Cleanup(func() {
		if err := ln.Close(); err != nil {
			s.t.Errorf("close the fake server: %v", err)
		}
		s.wg.Wait()
	})
}

func (s *fakeServer) serve(conn net.Conn) {
	defer conn.Close()
	w := &fakeConn{conn: conn}
	w.send("%s", greeting)
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		var req struct {
			Execute   string          `json:"execute"`
			Arguments json.RawMessage `json:"arguments"`
			ID        json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			s.t.Errorf("fake server: bad request %q: %v", sc.Text(), err)
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
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
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
	if got, want := g.Version.String(), "7.2.22Debian 1:7.2+dfsg-7+deb12u18"; got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	if len(g.Capabilities) != 1 || g.Capabilities[0] != "oob" {
		t.Errorf("capabilities = %v", g.Capabilities)
	}
}

func TestDialRetriesUntilSocketExists(t *testing.T) {
	s := &fakeServer{t: t, path: filepath.Join(t.TempDir(), "late.sock"), handle: echoHandler}
	time.AfterFunc(200*time.Millisecond, s.listen)
	c := dial(t, s, WithRetryInterval(10*time.Millisecond))
	if err := c.Execute(testCtx(t), "echo", map[string]int{"a": 1}, nil); err != nil {
		t.Fatalf("Execute: %v", err)
	}
}

func TestDialTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, filepath.Join(t.TempDir(), "missing.sock"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}

func TestDialBadOption(t *testing.T) {
	_, err := Dial(context.Background(), "x", WithEventBacklog(0))
	if err == nil {
		t.Fatal("want error for bad option")
	}
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
				if !errors.As(err, &qe) || qe.Class != tt.wantClass {
					t.Fatalf("err = %v, want *Error class %s", err, tt.wantClass)
				}
				if !strings.Contains(err.Error(), "qmp "+tt.cmd) {
					t.Errorf("error %q does not name the command", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			b, _ := json.Marshal(got)
			if string(b) != tt.want {
				t.Errorf("result = %s, want %s", b, tt.want)
			}
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
		t.Error(err)
	}
}
