package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pipeConsole returns a console fed by the returned writer through an
// io.Pipe, and the buffer receiving the raw log.
func pipeConsole(t *testing.T) (*console, *io.PipeWriter, *bytes.Buffer) {
	t.Helper()
	pr, pw := io.Pipe()
	raw := &bytes.Buffer{}
	c := newConsole(raw, "/machine/console.log", slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.readFrom(pr)
	}()
	t.Cleanup(func() {
		_ = pw.Close() // an io.PipeWriter's Close never fails
		<-done
	})
	return c, pw, raw
}

// send writes s to the console's pipe. It may be called from any
// goroutine.
func send(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s); err != nil {
		t.Errorf("write to the console: %v", err)
	}
}

func shortCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestExpectCursor(t *testing.T) {
	c, w, _ := pipeConsole(t)
	send(t, w, "step 1 ok\nstep 2 ok\n")
	ctx := shortCtx(t, 2*time.Second)
	re := regexp.MustCompile(`step (\d) ok`)
	for _, want := range []string{"1", "2"} {
		_, m, err := c.expect(ctx, re)
		if err != nil {
			t.Fatalf("expect step %s: %v", want, err)
		}
		if m[1] != want {
			t.Fatalf("got step %s, want %s", m[1], want)
		}
	}
	// Output already consumed is not matched again; new output is.
	go func() {
		time.Sleep(50 * time.Millisecond)
		send(t, w, "step 3 ok\n")
	}()
	if _, m, err := c.expect(ctx, re); err != nil || m[1] != "3" {
		t.Fatalf("third expect: %v %v", m, err)
	}
}

func TestExpectStripsEscapes(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		re     string
		want   string // whole match
		clean  string // whole cleaned console
		chunks int    // write in chunks of this many bytes (0 = all at once)
	}{
		{
			name:  "colour and carriage return",
			input: "\x1b[1m\x1b[33m\x1b[40mShell> \x1b[0m\x1b[37m\x1b[40m\r\n",
			re:    `Shell> \n`, want: "Shell> \n", clean: "Shell> \n",
		},
		{
			name:  "private mode and cursor moves",
			input: "\x1b[2J\x1b[01;01H\x1b[=3hBdsDxe: loading Boot0001\r\n",
			re:    `(?m)^BdsDxe: loading (\w+)$`, want: "BdsDxe: loading Boot0001", clean: "BdsDxe: loading Boot0001\n",
		},
		{
			name:  "escape split across writes",
			input: "lo\x1b[1;37mgin\x1b]0;title\x07: \x1b(B\r\n",
			re:    `login: `, want: "login: ", clean: "login: \n", chunks: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w, raw := pipeConsole(t)
			if tt.chunks == 0 {
				send(t, w, tt.input)
			} else {
				for i := 0; i < len(tt.input); i += tt.chunks {
					send(t, w, tt.input[i:min(i+tt.chunks, len(tt.input))])
				}
			}
			_, m, err := c.expect(shortCtx(t, 2*time.Second), regexp.MustCompile(tt.re))
			if err != nil {
				t.Fatal(err)
			}
			if m[0] != tt.want {
				t.Errorf("match %q, want %q", m[0], tt.want)
			}
			// Make sure all input has been processed before comparing.
			send(t, w, "#sync")
			if _, _, err := c.expect(shortCtx(t, 2*time.Second), regexp.MustCompile(`#sync`)); err != nil {
				t.Fatal(err)
			}
			if got := c.String(); got != tt.clean+"#sync" {
				t.Errorf("clean console %q, want %q", got, tt.clean+"#sync")
			}
			if raw.String() != tt.input+"#sync" {
				t.Errorf("raw log %q, want the input unchanged", raw.String())
			}
		})
	}
}

func TestExpectAnyEarliestWins(t *testing.T) {
	c, w, _ := pipeConsole(t)
	send(t, w, "Kernel panic - not syncing\nlogin: \n")
	ctx := shortCtx(t, 2*time.Second)
	login := regexp.MustCompile(`login: `)
	panicRE := regexp.MustCompile(`Kernel panic - (.*)`)
	i, m, err := c.expect(ctx, login, panicRE)
	if err != nil || i != 1 || m[1] != "not syncing" {
		t.Fatalf("got %d %q %v; want the panic (index 1), which comes first", i, m, err)
	}
	i, _, err = c.expect(ctx, login, panicRE)
	if err != nil || i != 0 {
		t.Fatalf("got %d %v; want login (index 0)", i, err)
	}
}

func TestExpectTimeoutCarriesTail(t *testing.T) {
	c, w, _ := pipeConsole(t)
	for i := range 100 {
		fmt.Fprintf(w, "line %d\r\n", i)
	}
	_, _, err := c.expect(shortCtx(t, 100*time.Millisecond), regexp.MustCompile(`never`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	msg := err.Error()
	for _, want := range []string{`"never"`, "line 60\n", "line 99", "/machine/console.log"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "line 59\n") {
		t.Errorf("error carries more than %d lines:\n%s", tailLines, msg)
	}
}

func TestExpectVMExited(t *testing.T) {
	c, w, _ := pipeConsole(t)
	send(t, w, "booting\n")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = w.Close() // an io.PipeWriter's Close never fails
		c.finish("QEMU exited (exit status 1)")
	}()
	start := time.Now()
	_, _, err := c.expect(shortCtx(t, 10*time.Second), regexp.MustCompile(`login: `))
	if err == nil || !strings.Contains(err.Error(), "QEMU exited (exit status 1)") || !strings.Contains(err.Error(), "booting") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("expect took %v after the VM exited", d)
	}
	// Output that arrived before the exit still matches.
	if _, _, err := c.expect(shortCtx(t, time.Second), regexp.MustCompile(`boot`)); err != nil {
		t.Errorf("matching earlier output after exit: %v", err)
	}
}

func TestExpectNoPatterns(t *testing.T) {
	c, _, _ := pipeConsole(t)
	if _, _, err := c.expect(context.Background()); err == nil {
		t.Fatal("want error")
	}
}
