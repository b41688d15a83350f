package main

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSubMigratesOnSIGUSR1 runs a real `quicmq sub` process: SIGUSR1 moves its connection to
// a new local socket (QUIC connection migration), and the subscription goes on there, with
// the record published after the move delivered on the same connection.
func TestSubMigratesOnSIGUSR1(t *testing.T) {
	bin := quicmqBinary(t)
	n := startCLINode(t)
	publishLines(t, n, "mig.t", "r0")

	cmd := exec.Command(bin, append([]string{"sub", "--topic", "mig.t", "--count", "2"}, n.conn()...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 4)
	go func() {
		for sc := bufio.NewScanner(stdout); sc.Scan(); {
			lines <- sc.Text()
		}
		close(lines)
	}()
	notes := make(chan string, 16)
	go func() {
		for sc := bufio.NewScanner(stderr); sc.Scan(); {
			notes <- sc.Text()
		}
		close(notes)
	}()
	next := func(ch chan string, what string) string {
		t.Helper()
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("sub ended before %s", what)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s within 30 s", what)
		}
		return ""
	}
	if l := next(lines, "the first record"); l != "0\tmig.t\tr0" {
		t.Fatalf("first line %q", l)
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if l := next(notes, "a migration notice"); !strings.HasPrefix(l, "quicmq: migrated to ") {
		t.Fatalf("stderr after SIGUSR1: %q", l)
	}
	publishLines(t, n, "mig.t", "r1")
	if l := next(lines, "the record published after the move"); l != "1\tmig.t\tr1" {
		t.Fatalf("second line %q", l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sub exited with %v", err)
	}
}
