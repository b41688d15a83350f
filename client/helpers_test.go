package client_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// testNode is a node on 127.0.0.1 port 0 with its data in a temporary directory.
type testNode struct {
	*node.Node
	stop func() // stops the node and waits for Run; also run by t.Cleanup
}

func newTestNode(t testing.TB, mod ...func(*node.Config)) *testNode {
	t.Helper()
	n, stop := nodetest.Start(t, mod...)
	return &testNode{Node: n, stop: stop}
}

// dial connects to n; the Conn is closed by t.Cleanup (a second Close is harmless).
func dial(t testing.TB, n *testNode, opts ...func(*client.Options)) *client.Conn {
	t.Helper()
	o := client.Options{CAFile: n.CAFile(), Name: t.Name()}
	for _, m := range opts {
		m(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, o, n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// publishN publishes n records "<prefix>-<i>" to topic, pipelined, and returns their acks.
func publishN(t testing.TB, c *client.Conn, topic, prefix string, n int) []client.Ack {
	t.Helper()
	ctx := testCtx(t)
	futures := make([]*client.Future, n)
	for i := range futures {
		f, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d", prefix, i)})
		if err != nil {
			t.Fatalf("publish %d to %s: %v", i, topic, err)
		}
		futures[i] = f
	}
	acks := make([]client.Ack, n)
	for i, f := range futures {
		a, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("ack %d of %s: %v", i, topic, err)
		}
		acks[i] = a
	}
	return acks
}

// nextN reads n records, failing the test on any error or after timeout.
func nextN(t testing.TB, s *client.Subscription, n int) []client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out := make([]client.Record, 0, n)
	for len(out) < n {
		r, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, r)
	}
	return out
}

// expectQuiet checks that no record arrives within d.
func expectQuiet(t testing.TB, s *client.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if r, err := s.Next(ctx); err == nil {
		t.Fatalf("unexpected record %s@%d %q", r.Topic, r.Offset, r.Payload)
	} else if ctx.Err() == nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// clientGoroutines lists the stacks of goroutines running code of package client.
func clientGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "quicmq/quicmq/client.") {
			out = append(out, g)
		}
	}
	return out
}

func runtimeGoroutines() int { return runtime.NumGoroutine() }
