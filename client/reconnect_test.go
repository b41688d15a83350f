package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// TestReconnect: with Options.Reconnect, a Conn whose node restarted dials it again on the
// next operation: publishing goes on, and a durable consumer subscribes again and resumes
// after its last ack. Without it, the Conn stays broken.
func TestReconnect(t *testing.T) {
	data := t.TempDir()
	n, stop := nodetest.Start(t, func(c *node.Config) { c.DataDir = data })
	addr := n.Addr().String()
	ctx := testCtx(t)
	open := func(reconnect bool) *client.Conn {
		c, err := client.Dial(ctx, addr, client.Options{CAFile: n.CAFile(), Reconnect: reconnect})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c, plain := open(true), open(false)
	publishN(t, c, "re.t", "a", 3)
	sub, err := c.Subscribe(ctx, "re.t", client.SubscribeOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range nextN(t, sub, 3) {
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	sub.Close() // waits until the node has the acks

	stop()
	// While the node is down, an operation fails within its context (the dial cannot
	// complete), and the Conn stays usable.
	down, cancel := context.WithTimeout(ctx, time.Second)
	_, err = c.Publish(down, client.Message{Topic: "re.t", Payload: []byte("lost")})
	cancel()
	if err == nil {
		t.Fatal("published with the node down")
	}
	t.Logf("publish with the node down: %v", err)
	nodetest.Start(t, func(c *node.Config) { c.DataDir, c.Listen = data, addr })

	if _, err := plain.Publish(ctx, client.Message{Topic: "re.t", Payload: []byte("x")}); err == nil {
		t.Fatal("a Conn without Reconnect published after its node restarted")
	}
	// The first publish may still meet the old connection, before the client saw it close.
	var ack client.Ack
	deadline := time.Now().Add(10 * time.Second)
	for {
		ack, err = c.Publish(ctx, client.Message{Topic: "re.t", Payload: []byte("after")})
		if err == nil || time.Now().After(deadline) {
			break
		}
		t.Logf("publish after the restart: %v (retrying)", err)
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no publish after the restart: %v", err)
	}
	if ack.Offset != 3 {
		t.Fatalf("publish after the restart at offset %d, want 3", ack.Offset)
	}
	sub, err = c.Subscribe(ctx, "re.t", client.SubscribeOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if rec := nextN(t, sub, 1)[0]; rec.Offset != 3 || string(rec.Payload) != "after" {
		t.Fatalf("durable consumer resumed at %d %q, want 3 \"after\"", rec.Offset, rec.Payload)
	}

	// Close while the node is gone: a failing reconnect must not hang or leak.
	c.Close()
	if _, err := c.Publish(ctx, client.Message{Topic: "re.t", Payload: []byte("y")}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("publish after Close: %v, want ErrClosed", err)
	}
}
