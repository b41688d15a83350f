package client_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// Subscriptions an application does not read hold their stream's receive window (512 KiB
// each to start with) of the connection's window too. With enough of them on one connection
// the connection's window is theirs, and a subscription that does read gets nothing: one
// shared stall, which a stream per subscription exists to prevent (invariant I5). The
// connection's first window covers 128 stalled streams at their first window (64 MiB, only
// credit: memory is used by what the node actually sends); this test stalls 24 (12 MiB of
// windows, more than the 8 MiB the window once was) and reads a fresh topic beside them.
func TestStalledSubscriptionsLeaveTheConnectionWindow(t *testing.T) {
	n := newTestNode(t)
	sc := dial(t, n)
	pc := dial(t, n, func(o *client.Options) { o.Name = "publisher" })
	ctx := testCtx(t)
	const stalled, records = 24, 1000
	for i := range stalled {
		if _, err := sc.Subscribe(ctx, "big", client.SubscribeOptions{From: client.Earliest}); err != nil {
			t.Fatalf("stalled subscription %d: %v", i, err)
		}
	}
	live, err := sc.Subscribe(ctx, "live", client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 1024)
	futures := make([]*client.Future, records)
	for i := range futures { // 1 MB for each of the 24: twice its stream's window
		if futures[i], err = pc.PublishAsync(ctx, client.Message{Topic: "big", Payload: payload}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	// One at a time, each published after the last arrived: by the later ones the stalled
	// streams have long taken all the node could send them.
	for i := range 20 {
		want := fmt.Sprintf("live-%d", i)
		if _, err := pc.Publish(ctx, client.Message{Topic: "live", Payload: []byte(want)}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := live.Next(rctx)
		cancel()
		if err != nil {
			t.Fatalf("live record %d beside %d stalled subscriptions on the connection: %v", i, stalled, err)
		}
		if string(r.Payload) != want {
			t.Fatalf("live record %d: %q, want %q", i, r.Payload, want)
		}
	}
}
