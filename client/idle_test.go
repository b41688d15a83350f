package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node/nodetest"
)

// TestIdleTimeout: with Options.IdleTimeout, a node that goes silent is noticed after about
// that long: a publish fails with a lost connection instead of hanging for QUIC's default
// 30 s (the test's own deadline is 20 s).
func TestIdleTimeout(t *testing.T) {
	n := newTestNode(t)
	path := nodetest.NewCutter(t, n.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), IdleTimeout: time.Second}, path.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Publish(ctx, client.Message{Topic: "idle", Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	path.Cut()
	began := time.Now()
	_, err = c.Publish(ctx, client.Message{Topic: "idle", Payload: []byte("after")})
	took := time.Since(began)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("publish on a silent path: %v after %v; want the connection lost after about 1 s", err, took)
	}
	t.Logf("publish on a silent path failed after %v: %v", took.Round(time.Millisecond), err)
}
