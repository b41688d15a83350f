package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
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
		c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Reconnect: reconnect}, addr)
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
		if !testlog.Pause(ctx, 50*time.Millisecond) {
			t.Fatalf("no publish after the restart: %v", err)
		}
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

// TestReconnectResumesSubscriptions: with Options.Reconnect, open subscriptions outlive a
// restart of their node: Next makes them again and goes on where they were, delivering
// nothing twice. A durable consumer resumes from its stored position (records acked before
// are not delivered again, unacked ones already delivered are skipped), a topic subscription
// from the record after its last, a start=latest pattern with what was stored since it began.
func TestReconnectResumesSubscriptions(t *testing.T) {
	data := t.TempDir()
	n, stop := nodetest.Start(t, func(c *node.Config) { c.DataDir = data })
	addr := n.Addr().String()
	ctx := testCtx(t)
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Reconnect: true}, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	written := publishN(t, c, "rs.a", "a", 3)
	testlog.WaitFor(t, 10*time.Second, "the clock past the second a resumed start=latest reads back", func() bool {
		return time.Since(written[2].Time) > 1100*time.Millisecond
	})
	dur, err := c.Subscribe(ctx, "rs.a", client.SubscribeOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	lit, err := c.Subscribe(ctx, "rs.a", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wild, err := c.Subscribe(ctx, "rs.>", client.SubscribeOptions{From: client.Latest})
	if err != nil {
		t.Fatal(err)
	}
	got := nextN(t, dur, 3)
	for _, rec := range got[:2] {
		if err := dur.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	nextN(t, lit, 3)
	testlog.WaitFor(t, 10*time.Second, "the node to store the acks", func() bool {
		last, ok, err := n.Log().Position("d", "rs.a")
		return err == nil && ok && last == got[1].Offset
	})

	stop()
	// A Next called while the node is down waits through the outage (it keeps trying to
	// subscribe again) and returns the first new record. The outage outlasts one attempt
	// (QUIC gives up a handshake after 5 s without an answer).
	during := make(chan client.Record, 1)
	go func() {
		rec, err := lit.Next(ctx)
		if err != nil {
			t.Errorf("Next across the outage: %v", err)
		}
		during <- rec
	}()
	// The outage outlasts QUIC's handshake timeout: time itself is what this waits for.
	time.Sleep(6 * time.Second)
	nodetest.Start(t, func(c *node.Config) { c.DataDir, c.Listen = data, addr })
	for {
		_, err := c.Publish(ctx, client.Message{Topic: "rs.a", Payload: []byte("a3")})
		if err == nil {
			break
		}
		t.Logf("publish after the restart: %v (retrying)", err)
		if !testlog.Pause(ctx, 50*time.Millisecond) {
			t.Fatalf("no publish after the restart: %v", err)
		}
	}
	publishN(t, c, "rs.b", "b", 1)
	if _, err := c.Publish(ctx, client.Message{Topic: "rs.a", Payload: []byte("a4")}); err != nil {
		t.Fatal(err)
	}

	offsets := func(recs []client.Record) (out []string) {
		for _, r := range recs {
			out = append(out, fmt.Sprintf("%s@%d", r.Topic, r.Offset))
		}
		return out
	}
	if g := offsets(nextN(t, dur, 2)); !slices.Equal(g, []string{"rs.a@3", "rs.a@4"}) {
		t.Errorf("durable consumer after the restart: %v, want rs.a@3 rs.a@4", g)
	}
	if g := offsets(append([]client.Record{<-during}, nextN(t, lit, 1)...)); !slices.Equal(g, []string{"rs.a@3", "rs.a@4"}) {
		t.Errorf("topic subscription across the outage: %v, want rs.a@3 rs.a@4", g)
	}
	g := offsets(nextN(t, wild, 3))
	slices.Sort(g)
	if !slices.Equal(g, []string{"rs.a@3", "rs.a@4", "rs.b@0"}) {
		t.Errorf("start=latest pattern after the restart: %v, want rs.a@3 rs.a@4 rs.b@0", g)
	}
	for _, s := range []*client.Subscription{dur, lit, wild} {
		expectQuiet(t, s, 300*time.Millisecond)
	}
}
