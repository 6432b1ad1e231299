package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// eventHandler emits the events named in "emit" (comma separated) before
// replying, and again a little after replying for "emit-later".
func eventHandler(w *fakeConn, cmd string, args, id json.RawMessage) {
	var a struct {
		Names string `json:"names"`
	}
	// Only emit and emit-later have arguments: the others' leave Names "".
	_ = json.Unmarshal(args, &a)
	switch cmd {
	case "emit":
		for _, n := range strings.Split(a.Names, ",") {
			w.event(n, `{"device": "`+n+`-dev"}`)
		}
		w.send(`{"return": {}, "id": %s}`, id)
	case "emit-later":
		w.send(`{"return": {}, "id": %s}`, id)
		go func() {
			time.Sleep(100 * time.Millisecond)
			w.event(a.Names, `{}`)
		}()
	case "hang":
	}
}

func TestWaitEvent(t *testing.T) {
	tests := []struct {
		name    string
		cmd     string
		emit    string
		wait    []string
		wantErr bool
	}{
		{name: "event before call is in backlog", cmd: "emit", emit: "SHUTDOWN", wait: []string{"SHUTDOWN"}},
		{name: "event after call", cmd: "emit-later", emit: "RESET", wait: []string{"RESET"}},
		{name: "successive events consumed in order", cmd: "emit", emit: "A,B,A", wait: []string{"A", "B", "A"}},
		{name: "consumed event is not seen twice", cmd: "emit", emit: "A", wait: []string{"A", "A"}, wantErr: true},
		{name: "unrelated event does not match", cmd: "emit", emit: "B", wait: []string{"A"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, newFakeServer(t, eventHandler))
			if err := c.Execute(testCtx(t), tt.cmd, map[string]string{"names": tt.emit}, nil); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			var err error
			for _, name := range tt.wait {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				var ev Event
				ev, err = c.WaitEvent(ctx, name)
				cancel()
				if err != nil {
					break
				}
				if ev.Name != name {
					t.Errorf("got event %s, want %s", ev.Name, name)
				}
				if ev.Timestamp.Unix() != 1700000000 {
					t.Errorf("timestamp = %v", ev.Timestamp)
				}
			}
			if tt.wantErr != (err != nil) {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want deadline exceeded", err)
			}
		})
	}
}

func TestWaitEventFunc(t *testing.T) {
	c := dial(t, newFakeServer(t, eventHandler))
	if err := c.Execute(testCtx(t), "emit", map[string]string{"names": "DEVICE_DELETED,X"}, nil); err != nil {
		t.Fatal(err)
	}
	ev, err := c.WaitEventFunc(testCtx(t), func(e Event) bool {
		var d struct{ Device string }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Errorf("event %s: %v", e.Name, err)
		}
		return d.Device == "X-dev"
	})
	if err != nil || ev.Name != "X" {
		t.Fatalf("got %v, %v; want event X", ev, err)
	}
}

func TestBacklogBounded(t *testing.T) {
	c := dial(t, newFakeServer(t, eventHandler), WithEventBacklog(2))
	if err := c.Execute(testCtx(t), "emit", map[string]string{"names": "A,B,C"}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.WaitEvent(ctx, "A"); err == nil {
		t.Error("oldest event A should have been dropped from a backlog of 2")
	}
	for _, n := range []string{"B", "C"} {
		if _, err := c.WaitEvent(testCtx(t), n); err != nil {
			t.Errorf("WaitEvent(%s): %v", n, err)
		}
	}
}

func TestEventsChannel(t *testing.T) {
	c := dial(t, newFakeServer(t, eventHandler))
	if err := c.Execute(testCtx(t), "emit", map[string]string{"names": "A,B"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A", "B"} {
		select {
		case ev := <-c.Events():
			if ev.Name != want {
				t.Errorf("event %s, want %s", ev.Name, want)
			}
			if string(ev.Data) != `{"device": "`+want+`-dev"}` {
				t.Errorf("data = %s", ev.Data)
			}
		case <-time.After(time.Second):
			t.Fatalf("no event %s on channel", want)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-c.Events(); ok {
		t.Error("events channel not closed after Close")
	}
}

func TestConnectionDrop(t *testing.T) {
	tests := []struct {
		name  string
		setup func(c *Client)
	}{
		{name: "server drops connection", setup: func(c *Client) {
			// It fails with ErrClosed, as the pending call checks.
			go func() { _ = c.Execute(context.Background(), "drop", nil, nil) }()
		}},
		{name: "client closes", setup: func(c *Client) {
			time.AfterFunc(50*time.Millisecond, func() {
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, newFakeServer(t, eventHandler))
			errc := make(chan error, 1)
			go func() { errc <- c.Execute(context.Background(), "hang", nil, nil) }()
			time.Sleep(50 * time.Millisecond)
			tt.setup(c)
			select {
			case err := <-errc:
				if !errors.Is(err, ErrClosed) {
					t.Errorf("pending Execute err = %v, want ErrClosed", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("pending Execute did not return after the connection dropped")
			}
			select {
			case <-c.Done():
			case <-time.After(time.Second):
				t.Fatal("Done not closed")
			}
			if err := c.Execute(testCtx(t), "emit", nil, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Execute after drop err = %v, want ErrClosed", err)
			}
			if _, err := c.WaitEvent(testCtx(t), "SHUTDOWN"); !errors.Is(err, ErrClosed) {
				t.Errorf("WaitEvent after drop err = %v, want ErrClosed", err)
			}
			if err := c.Close(); err != nil {
				t.Errorf("Close after the connection ended: %v", err)
			}
		})
	}
}

func TestEventBeforeDropStillDelivered(t *testing.T) {
	c := dial(t, newFakeServer(t, eventHandler))
	if err := c.Execute(testCtx(t), "emit", map[string]string{"names": "SHUTDOWN"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Execute(testCtx(t), "drop", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("drop: %v, want ErrClosed", err)
	}
	<-c.Done()
	if _, err := c.WaitEvent(testCtx(t), "SHUTDOWN"); err != nil {
		t.Fatalf("SHUTDOWN received before the drop should still be returned: %v", err)
	}
}

func TestExecuteContextCancel(t *testing.T) {
	c := dial(t, newFakeServer(t, eventHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Execute(ctx, "hang", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "qmp hang") {
		t.Fatalf("err = %v", err)
	}
	// The client is still usable afterwards.
	if err := c.Execute(testCtx(t), "emit", map[string]string{"names": "A"}, nil); err != nil {
		t.Fatalf("Execute after cancelled call: %v", err)
	}
}
