package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestSubMigratesOnSIGUSR1 runs a real `quicmq sub` process: SIGUSR1 moves its connection to
// a new local socket (QUIC connection migration), and the subscription goes on there, with
// the record published after the move delivered on the same connection.
func TestSubMigratesOnSIGUSR1(t *testing.T) {
	bin := quicmqBinary(t)
	n := startCLINode(t)
	publishLines(t, n, "mig.t", "r0")

	sub := nodeproc.Run(t, bin, append([]string{"sub", "--topic", "mig.t", "--count", "2"}, n.conn()...)...)
	next := func(what string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("no %s: %v\n%s", what, err, sub.Stderr())
		}
		return l.Text
	}
	if l := next("first record"); l != "0\tmig.t\tr0" {
		t.Fatalf("first line %q", l)
	}
	if err := sub.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	testlog.WaitForErr(t, 30*time.Second, "a migration notice", func() error {
		if strings.HasPrefix(sub.Stderr(), "quicmq: migrated to ") {
			return nil
		}
		return fmt.Errorf("stderr after SIGUSR1: %q", sub.Stderr())
	})
	publishLines(t, n, "mig.t", "r1")
	if l := next("the record published after the move"); l != "1\tmig.t\tr1" {
		t.Fatalf("second line %q", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitChild(ctx, sub); err != nil {
		t.Fatalf("sub exited with %v\n%s", err, sub.Stderr())
	}
}
