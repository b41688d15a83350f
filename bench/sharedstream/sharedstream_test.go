package sharedstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/sharedstream"
	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

func sharedNode(t *testing.T, mod ...func(*node.Config)) *node.Node {
	t.Helper()
	n, _ := nodetest.Start(t, append([]func(*node.Config){func(c *node.Config) { c.AblationSharedStream = true }}, mod...)...)
	return n
}

func dial(t *testing.T, n *node.Node, token ...string) *client.Conn {
	t.Helper()
	o := client.Options{CAFile: n.CAFile(), Name: t.Name()}
	if len(token) > 0 {
		o.Token = token[0]
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

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func publishN(t *testing.T, c *client.Conn, topic, prefix string, n int) {
	t.Helper()
	ctx := testCtx(t)
	for i := range n {
		if _, err := c.Publish(ctx, client.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d", prefix, i)}); err != nil {
			t.Fatalf("publish %d to %s: %v", i, topic, err)
		}
	}
}

func codeOf(err error) (client.Code, string) {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Code, e.Message
	}
	return 0, ""
}

// A node without the ablation refuses a shared stream with CodeForbidden.
func TestSharedStreamOffByDefault(t *testing.T) {
	n, _ := nodetest.Start(t)
	sh, err := sharedstream.Open(testCtx(t), dial(t, n))
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	_, err = sh.Subscribe(testCtx(t), "a", client.SubscribeOptions{})
	if code, _ := codeOf(err); code != client.CodeForbidden {
		t.Fatalf("node without the ablation: %v, want CodeForbidden", err)
	}
}

const (
	acmeToken   = "acme-token-0123456789"
	readerToken = "acme-reader-0123456789"
	globexToken = "globex-token-0123456789"
)

func tenants(c *node.Config) {
	c.Credentials = []node.Credential{
		{Token: acmeToken, Tenant: "acme"},
		{Token: readerToken, Tenant: "acme", Publish: []string{}, Subscribe: []string{"orders.*"}},
		{Token: globexToken, Tenant: "globex"},
	}
}

// A shared stream goes through the same authorization as a stream of its own: a tenant
// reads its own namespace only, and a pattern its grants do not cover is refused with the
// same error.
func TestSharedStreamAuthorizes(t *testing.T) {
	n := sharedNode(t, tenants)
	globex, acme := dial(t, n, globexToken), dial(t, n, acmeToken)
	publishN(t, globex, "orders.eu", "globex", 3)
	ctx := testCtx(t)

	// acme's view of "globex.orders.eu" and ">" is its own namespace: the first record it
	// gets, from earliest, is its own, published after it subscribed.
	sh, err := sharedstream.Open(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	all, err := sh.Subscribe(ctx, ">", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := sh.Subscribe(ctx, "globex.orders.eu", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, acme, "globex.orders.eu", "acme", 1)
	for _, s := range []*sharedstream.Subscription{all, other} {
		r, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Topic != "globex.orders.eu" || string(r.Payload) != "acme-0" {
			t.Fatalf("acme got %s@%d %q: another tenant's record", r.Topic, r.Offset, r.Payload)
		}
	}

	// A grant-less pattern: the same code and message as on a stream of its own.
	reader := dial(t, n, readerToken)
	_, own := reader.Subscribe(ctx, "orders.>", client.SubscribeOptions{})
	sh2, err := sharedstream.Open(ctx, reader)
	if err != nil {
		t.Fatal(err)
	}
	defer sh2.Close()
	_, shared := sh2.Subscribe(ctx, "orders.>", client.SubscribeOptions{})
	oc, om := codeOf(own)
	sc, sm := codeOf(shared)
	if oc != client.CodeForbidden || sc != oc || sm != om {
		t.Fatalf("grant-less pattern: own stream %v, shared stream %v: want the same CodeForbidden", own, shared)
	}
}

// A durable consumer on a shared stream stores its position like one on its own stream.
func TestSharedStreamDurable(t *testing.T) {
	n := sharedNode(t)
	c := dial(t, n)
	publishN(t, c, "d.a", "r", 5)
	ctx := testCtx(t)
	sh, err := sharedstream.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sh.Subscribe(ctx, "d.a", client.SubscribeOptions{Durable: "w"})
	if err != nil {
		t.Fatal(err)
	}
	var last client.Record
	for range 3 {
		if last, err = s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ack(last); err != nil {
		t.Fatal(err)
	}
	sh.Close()
	own, err := c.Subscribe(ctx, "d.a", client.SubscribeOptions{Durable: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if r, err := own.Next(ctx); err != nil || r.Offset != 3 {
		t.Fatalf("resumed at %d (%v), want 3", r.Offset, err)
	}
}

// Ten subscriptions on one shared stream each get their topic's records, in order and
// intact, also records published after they subscribed.
func TestSharedStreamRecords(t *testing.T) {
	n := sharedNode(t)
	c := dial(t, n)
	const subs, per = 10, 200
	for i := range subs {
		publishN(t, c, fmt.Sprintf("s.%d", i), fmt.Sprintf("early%d", i), per/2)
	}
	sh, err := sharedstream.Open(testCtx(t), c)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	ss := make([]*sharedstream.Subscription, subs)
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
	c := dial(t, n)
	sh, err := sharedstream.Open(testCtx(t), c)
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
