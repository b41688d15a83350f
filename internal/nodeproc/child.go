package nodeproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Line is a line a Child printed on its standard output, with when it was read.
type Line struct {
	Text string
	At   time.Time
}

// Child is a quicmq command other than a node run as a process by a test: a `quicmq sub`
// client, `quicmq dev`, a shell line from a banner. One goroutine reads its standard output
// for its whole life and then reaps it; what it printed is kept whole (standard output as
// lines with their arrival times, standard error as text), so that a reader that falls behind
// or comes after the end loses nothing. Next takes the lines in order (one reader).
type Child struct {
	Name string

	cmd  *exec.Cmd
	done chan struct{} // closed once the output is read to its end and the process reaped
	err  error         // cmd.Wait's, written before done is closed

	mu     sync.Mutex // guards what follows: the reader and cmd's stderr copy write them
	lines  []Line
	more   chan struct{} // closed and replaced when a line arrives
	stderr strings.Builder
	next   int // the line Next returns next
}

// StartChild starts cmd (its Stdout and Stderr must be unset: the Child reads them) as the
// child named name (for messages). t.Cleanup interrupts it (SIGINT), waits up to 10 s for it
// to exit, then kills it.
func StartChild(t testing.TB, name string, cmd *exec.Cmd) *Child {
	t.Helper()
	c := &Child{Name: name, cmd: cmd, done: make(chan struct{}), more: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cmd.Stderr = stderrWriter{c}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go c.read(stdout)
	t.Cleanup(func() {
		if !c.Stop(10 * time.Second) {
			t.Logf("%s did not exit within 10 s of SIGINT: killed", name)
		}
	})
	return c
}

// Run is StartChild of `bin args...`.
func Run(t testing.TB, bin string, args ...string) *Child {
	t.Helper()
	name := bin
	if len(args) > 0 {
		name += " " + args[0]
	}
	return StartChild(t, name, exec.Command(bin, args...))
}

// read reads standard output to its end, then reaps the process (Wait only after every read:
// exec's rule), then closes done.
func (c *Child) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		c.mu.Lock()
		c.lines = append(c.lines, Line{sc.Text(), time.Now()})
		close(c.more)
		c.more = make(chan struct{})
		c.mu.Unlock()
	}
	io.Copy(io.Discard, stdout) // a line too long for the scanner: drain, so the child never blocks
	c.err = c.cmd.Wait()
	close(c.done)
}

type stderrWriter struct{ c *Child }

func (w stderrWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.stderr.Write(p)
}

// Next returns the next line of standard output not yet returned, waiting for it; io.EOF once
// the process has ended and every line was returned, ctx's error if it ends first.
func (c *Child) Next(ctx context.Context) (Line, error) {
	for {
		c.mu.Lock()
		if c.next < len(c.lines) {
			l := c.lines[c.next]
			c.next++
			c.mu.Unlock()
			return l, nil
		}
		more := c.more
		c.mu.Unlock()
		select {
		case <-more:
		case <-c.done:
			c.mu.Lock()
			left := c.next < len(c.lines)
			c.mu.Unlock()
			if !left {
				return Line{}, io.EOF
			}
		case <-ctx.Done():
			return Line{}, ctx.Err()
		}
	}
}

// WaitOutput takes lines with Next until one contains s, and returns every line taken, joined
// with newlines (each ending in one). It fails the test if the process ends first or nothing
// does within d.
func (c *Child) WaitOutput(t testing.TB, s string, d time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var b strings.Builder
	for {
		l, err := c.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			t.Fatalf("%s ended (%v) before it printed %q:\n%s\n%s", c.Name, c.err, s, b.String(), c.Stderr())
		case err != nil:
			t.Fatalf("%s did not print %q within %v:\n%s\n%s", c.Name, s, d, b.String(), c.Stderr())
		}
		b.WriteString(l.Text + "\n")
		if strings.Contains(l.Text, s) {
			return b.String()
		}
	}
}

// Stdout is everything the process printed on its standard output so far.
func (c *Child) Stdout() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, l := range c.lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

// Stderr is everything the process printed on its standard error so far.
func (c *Child) Stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// Pid is the process's ID.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Signal sends sig to the process.
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// Done is closed once the process has exited, its output has been read and it was reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is how the process exited (exec.Cmd.Wait's error; nil for exit 0); call it after Done.
func (c *Child) Err() error {
	<-c.done
	return c.err
}

// Kill kills the process (SIGKILL) and waits until it is reaped.
func (c *Child) Kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Stop interrupts the process (SIGINT, Ctrl-C) and waits up to grace for it to exit; then it
// kills it. It reports whether the process exited by itself.
func (c *Child) Stop(grace time.Duration) bool {
	return signalThenKill(c.cmd.Process, syscall.SIGINT, c.done, grace)
}

// String names the child and its state, for messages.
func (c *Child) String() string {
	select {
	case <-c.done:
		return fmt.Sprintf("%s (exited: %v)", c.Name, c.err)
	default:
		return c.Name + " (running)"
	}
}
