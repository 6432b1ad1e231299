// Package qmp is a small client for the QEMU Machine Protocol (QMP).
//
// A Client talks to one QMP monitor over a unix socket. Execute is safe for
// concurrent callers: a single reader goroutine demultiplexes command replies
// (matched by id) from asynchronous events, which are delivered both on the
// Events channel and into a bounded backlog that WaitEvent searches, so an
// event that arrived before WaitEvent was called is not lost.
package qmp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// ErrClosed is returned (wrapped) by calls made after the connection to the
// QMP server has been closed, by Close or because QEMU went away.
var ErrClosed = errors.New("qmp connection closed")

// Error is the error QEMU returns for a failed command.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return e.Class + ": " + e.Desc }

// Event is an asynchronous QMP event.
type Event struct {
	Name      string
	Data      json.RawMessage // nil when the event has no data
	Timestamp time.Time
}

// Version is QEMU's version as announced in the QMP greeting.
type Version struct {
	Major, Minor, Micro int
	Package             string
}

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d%s", v.Major, v.Minor, v.Micro, v.Package)
}

// Greeting is the banner QEMU sends when a client connects.
type Greeting struct {
	Version      Version
	Capabilities []string
}

type options struct {
	log           *slog.Logger
	backlog       int
	eventBuffer   int
	retryInterval time.Duration
}

// Option configures Dial.
type Option func(*options) error

// WithLogger sets the logger for protocol-level debug logs. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("nil logger")
		}
		o.log = l
		return nil
	}
}

// WithEventBacklog sets how many events are remembered for WaitEvent.
// The oldest are dropped first. Default 256.
func WithEventBacklog(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("event backlog %d: must be at least 1", n)
		}
		o.backlog = n
		return nil
	}
}

// WithEventBuffer sets the capacity of the Events channel. Events that do
// not fit because nobody drains the channel are dropped from the channel
// (they still reach the backlog). Default 64.
func WithEventBuffer(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("event buffer %d: must not be negative", n)
		}
		o.eventBuffer = n
		return nil
	}
}

// WithRetryInterval sets how often Dial retries while the socket does not
// accept connections yet. Default 50ms.
func WithRetryInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("retry interval %v: must be positive", d)
		}
		o.retryInterval = d
		return nil
	}
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		backlog:       256,
		eventBuffer:   64,
		retryInterval: 50 * time.Millisecond,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// wire types

type request struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        uint64 `json:"id"`
}

type message struct {
	QMP *struct {
		Version struct {
			QEMU struct {
				Major int `json:"major"`
				Minor int `json:"minor"`
				Micro int `json:"micro"`
			} `json:"qemu"`
			Package string `json:"package"`
		} `json:"version"`
		Capabilities []string `json:"capabilities"`
	} `json:"QMP"`
	ID        json.RawMessage `json:"id"`
	Return    json.RawMessage `json:"return"`
	Error     *Error          `json:"error"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

func (m *message) greeting() (Greeting, bool) {
	if m.QMP == nil {
		return Greeting{}, false
	}
	v := m.QMP.Version
	return Greeting{
		Version: Version{
			Major: v.QEMU.Major, Minor: v.QEMU.Minor, Micro: v.QEMU.Micro,
			Package: v.Package,
		},
		Capabilities: m.QMP.Capabilities,
	}, true
}

func (m *message) event() Event {
	ev := Event{Name: m.Event, Data: m.Data}
	if m.Timestamp != nil && m.Timestamp.Seconds >= 0 {
		ev.Timestamp = time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000)
	}
	return ev
}

// response is what the reader hands to a waiting Execute.
type response struct {
	ret json.RawMessage
	err error
}
