package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

func sharedNode(t *testing.T) *testNode {
	return newTestNode(t, func(c *node.Config) { c.AblationSharedStream = true })
}

func withShared(o *client.Options) { o.AblationSharedStream = true }

func TestSharedStreamNeedsOptions(t *testing.T) {
	n := newTestNode(t)
	if _, err := dial(t, n).OpenSharedStream(testCtx(t)); !errors.Is(err, client.ErrAblationOff) {
		t.Fatalf("without the client option: %v, want ErrAblationOff", err)
	}
	sh, err := dial(t, n, withShared).OpenSharedStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	_, err = sh.Subscribe(testCtx(t), "a", client.SubscribeOptions{})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeForbidden {
		t.Fatalf("node without the ablation: %v, want CodeForbidden", err)
	}
}

// Ten subscriptions on one shared stream each get their topic's records, in order and
// intact, also records published after they subscribed.
func TestSharedStreamRecords(t *testing.T) {
	n := sharedNode(t)
	c := dial(t, n, withShared)
	const subs, per = 10, 200
	for i := range subs {
		publishN(t, c, fmt.Sprintf("s.%d", i), fmt.Sprintf("early%d", i), per/2)
	}
	sh, err := c.OpenSharedStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	ss := make([]*client.SharedSubscription, subs)
	for i := range ss {
		if ss[i], err = sh.Subscribe(testCtx(t), fmt.Sprintf("s.%d", i), client.SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range subs {
		publishN(t, c, fmt.Sprintf("s.%d", i), fmt.Sprintf("late%d", i), per/2)
	}
	for i, s := range ss {
		for k := range per {
			r, err := s.Next(testCtx(t))
			if err != nil {
				t.Fatalf("sub %d record %d: %v", i, k, err)
			}
			want := fmt.Sprintf("early%d-%d", i, k)
			if k >= per/2 {
				want = fmt.Sprintf("late%d-%d", i, k-per/2)
			}
			if r.Topic != fmt.Sprintf("s.%d", i) || r.Offset != uint64(k) || string(r.Payload) != want {
				t.Fatalf("sub %d: got %s@%d %q, want s.%d@%d %q", i, r.Topic, r.Offset, r.Payload, i, k, want)
			}
			if k == per-1 {
				if err := s.Ack(r); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	sh.Close()
	if _, err := ss[0].Next(testCtx(t)); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// The point of the ablation: on a shared stream, a subscription the application does not
// read stops the others (as on one TCP connection), until it is closed.
func TestSharedStreamHeadOfLineBlocking(t *testing.T) {
	n := sharedNode(t)
	c := dial(t, n, withShared)
	sh, err := c.OpenSharedStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	stalled, err := sh.Subscribe(testCtx(t), "hol.a", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := sh.Subscribe(testCtx(t), "hol.b", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Far more than the stalled subscription's queue, the stream window and the node's
	// read-ahead can hold between them.
	const total = 4000
	payload := make([]byte, 1024)
	ctx := testCtx(t)
	if err := nodetest.PublishPipelined(ctx, c, "hol.a", payload, total); err != nil {
		t.Fatal(err)
	}
	if err := nodetest.PublishPipelined(ctx, c, "hol.b", payload, total); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < total {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := reader.Next(wctx)
		cancel()
		if err != nil {
			break
		}
		got++
	}
	if got == total {
		t.Fatalf("the reading subscription got all %d records while the other was stalled: no head-of-line blocking", total)
	}
	t.Logf("reading subscription stalled after %d of %d records", got, total)
	stalled.Close()
	for ; got < total; got++ {
		if _, err := reader.Next(ctx); err != nil {
			t.Fatalf("after closing the stalled subscription, record %d: %v", got, err)
		}
	}
}
