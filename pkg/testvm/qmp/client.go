package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Client is a connection to a QMP monitor. Create it with Dial.
type Client struct {
	conn     net.Conn
	dec      *json.Decoder
	log      *slog.Logger
	greeting Greeting
	nextID   atomic.Uint64

	writeMu sync.Mutex // serialises writes to conn

	mu       sync.Mutex
	pending  map[uint64]chan response
	backlog  []Event
	maxLog   int
	changed  chan struct{} // closed and replaced whenever backlog grows
	closeErr error         // set once the reader has stopped

	events    chan Event
	done      chan struct{} // closed when the reader has stopped
	closeOnce sync.Once
}

// Dial connects to the QMP unix socket at socketPath, retrying until ctx is
// done while the socket does not exist or refuses connections (QEMU creates
// it shortly after start), reads the greeting and negotiates capabilities.
func Dial(ctx context.Context, socketPath string, opts ...Option) (*Client, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("qmp dial %s: %w", socketPath, err)
	}
	conn, err := dialRetry(ctx, socketPath, o.retryInterval)
	if err != nil {
		return nil, fmt.Errorf("qmp dial %s: %w", socketPath, err)
	}
	c := &Client{
		conn:    conn,
		dec:     json.NewDecoder(conn),
		log:     o.log,
		pending: make(map[uint64]chan response),
		maxLog:  o.backlog,
		changed: make(chan struct{}),
		events:  make(chan Event, o.eventBuffer),
		done:    make(chan struct{}),
	}
	if err := c.readGreeting(ctx); err != nil {
		_ = conn.Close() // err says why
		return nil, fmt.Errorf("qmp greeting from %s: %w", socketPath, err)
	}
	go c.readLoop()
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		_ = c.Close() // err says why
		return nil, err
	}
	c.log.Debug("qmp connected", "socket", socketPath, "qemu", c.greeting.Version.String())
	return c, nil
}

func dialRetry(ctx context.Context, path string, every time.Duration) (net.Conn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return conn, nil
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// maxBeforeGreeting bounds how many events readGreeting accepts ahead of
// the greeting before it gives up on the peer being a QMP monitor.
const maxBeforeGreeting = 64

// readGreeting reads the greeting synchronously, honouring ctx. QEMU can
// send an event before the greeting: a monitor that has not yet handled
// its socket's "opened" event still counts as negotiated and is sent
// events. Those go to the backlog like any other event.
func (c *Client) readGreeting(ctx context.Context) error {
	// A deadline fails to be set only on a closed conn, whose reads fail
	// anyway.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		stop()
		_ = c.conn.SetReadDeadline(time.Time{})
	}()
	for range maxBeforeGreeting + 1 {
		var raw json.RawMessage
		if err := c.dec.Decode(&raw); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		var m message
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("first message %s: %w", clip(raw), err)
		}
		if g, ok := m.greeting(); ok {
			c.greeting = g
			return nil
		}
		if m.Event == "" {
			return fmt.Errorf("first message is not a QMP greeting: %s", clip(raw))
		}
		c.deliverEvent(m.event())
	}
	return fmt.Errorf("no QMP greeting after %d events", maxBeforeGreeting)
}

// clip shortens a message for an error.
func clip(b []byte) string {
	const most = 200
	if len(b) <= most {
		return string(b)
	}
	return string(b[:most]) + "…"
}

// Greeting returns the greeting QEMU sent on connect.
func (c *Client) Greeting() Greeting { return c.greeting }

// Execute runs command with args (marshalled to JSON; nil for none) and
// decodes the reply's "return" value into result unless result is nil.
// A command QEMU rejects yields a *Error (use errors.As). If the connection
// drops before the reply arrives, Execute returns an error wrapping ErrClosed.
func (c *Client) Execute(ctx context.Context, command string, args any, result any) error {
	id := c.nextID.Add(1)
	b, err := json.Marshal(request{Execute: command, Arguments: args, ID: id})
	if err != nil {
		return fmt.Errorf("qmp %s: encoding arguments: %w", command, err)
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.closeErr != nil {
		err := c.closeErr
		c.mu.Unlock()
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()

	if err := c.write(ctx, append(b, '\n')); err != nil {
		if cerr := c.Err(); cerr != nil {
			// The connection ended under the write: say so, as for a
			// reply that never came.
			return fmt.Errorf("qmp %s: %w", command, cerr)
		}
		return fmt.Errorf("qmp %s: sending: %w", command, err)
	}
	var r response
	select {
	case r = <-ch:
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: waiting for reply: %w", command, ctx.Err())
	}
	if r.err != nil {
		return fmt.Errorf("qmp %s: %w", command, r.err)
	}
	if result != nil && len(r.ret) > 0 {
		if err := json.Unmarshal(r.ret, result); err != nil {
			return fmt.Errorf("qmp %s: decoding reply: %w", command, err)
		}
	}
	return nil
}

func (c *Client) write(ctx context.Context, b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		if err := c.conn.SetWriteDeadline(dl); err != nil {
			return err
		}
		// It fails only on a closed conn, whose writes fail anyway.
		defer func() { _ = c.conn.SetWriteDeadline(time.Time{}) }()
	}
	_, err := c.conn.Write(b)
	return err
}

// readLoop is the only reader of conn after the greeting.
func (c *Client) readLoop() {
	var err error
	for {
		var m message
		if err = c.dec.Decode(&m); err != nil {
			break
		}
		switch {
		case m.Event != "":
			c.deliverEvent(m.event())
		case len(m.ID) > 0:
			c.deliverReply(&m)
		default:
			c.log.Debug("qmp: ignoring message without id or event")
		}
	}
	c.shutdown(err)
}

func (c *Client) deliverReply(m *message) {
	var id uint64
	if err := json.Unmarshal(m.ID, &id); err != nil {
		c.log.Debug("qmp: reply with foreign id", "id", string(m.ID))
		return
	}
	r := response{ret: m.Return}
	if m.Error != nil {
		r.err = m.Error
	}
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch == nil {
		c.log.Debug("qmp: reply nobody waits for", "id", id)
		return
	}
	ch <- r // buffered, never blocks
}

func (c *Client) deliverEvent(ev Event) {
	c.log.Debug("qmp event", "name", ev.Name, "data", string(ev.Data))
	c.mu.Lock()
	if len(c.backlog) >= c.maxLog {
		c.backlog = append(c.backlog[:0], c.backlog[1:]...)
	}
	c.backlog = append(c.backlog, ev)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	select {
	case c.events <- ev:
	default:
		c.log.Debug("qmp: events channel full, dropping", "name", ev.Name)
	}
}

// shutdown fails every pending call and marks the client closed.
func (c *Client) shutdown(readErr error) {
	c.mu.Lock()
	if c.closeErr == nil {
		c.closeErr = fmt.Errorf("%w: %w", ErrClosed, readErr)
	}
	for id, ch := range c.pending {
		ch <- response{err: c.closeErr}
		delete(c.pending, id)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	_ = c.conn.Close() // its reads have ended (Close may have closed it already)
	close(c.events)
	close(c.done)
}

// Events returns a channel carrying every event as it arrives. It is closed
// when the connection ends. Events are dropped from the channel (not from
// the WaitEvent backlog) when its buffer is full.
func (c *Client) Events() <-chan Event { return c.events }

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// WaitEvent returns the oldest not yet consumed event called name, waiting
// for one to arrive if the backlog holds none. The returned event is removed
// from the backlog, so successive calls see successive events.
func (c *Client) WaitEvent(ctx context.Context, name string) (Event, error) {
	ev, err := c.WaitEventFunc(ctx, func(e Event) bool { return e.Name == name })
	if err != nil {
		return Event{}, fmt.Errorf("qmp wait for event %s: %w", name, err)
	}
	return ev, nil
}

// WaitEventFunc is WaitEvent with an arbitrary predicate. match is called
// with the client's lock held and must not call the Client.
func (c *Client) WaitEventFunc(ctx context.Context, match func(Event) bool) (Event, error) {
	for {
		c.mu.Lock()
		for i, ev := range c.backlog {
			if match(ev) {
				c.backlog = append(c.backlog[:i], c.backlog[i+1:]...)
				c.mu.Unlock()
				return ev, nil
			}
		}
		changed, closeErr := c.changed, c.closeErr
		c.mu.Unlock()
		if closeErr != nil {
			return Event{}, closeErr
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// ClearEvents empties the backlog, so that WaitEvent only sees events that
// arrive afterwards.
func (c *Client) ClearEvents() {
	c.mu.Lock()
	c.backlog = nil
	c.mu.Unlock()
}

// Close closes the connection and waits for the reader to stop. Pending
// Execute calls return an error wrapping ErrClosed.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		if c.closeErr == nil {
			c.closeErr = fmt.Errorf("%w: by Close", ErrClosed)
		}
		c.mu.Unlock()
		if cerr := c.conn.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = fmt.Errorf("qmp close: %w", cerr)
		}
		<-c.done
	})
	return err
}
