package node

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// TestExclusiveDurable: a second subscriber of a held durable is refused with CodeConflict
// naming the durable and where it is held; once the first closes, a new one gets it and
// resumes after the last ACK; no record is delivered to two subscribers.
func TestExclusiveDurable(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	groupPublish(t, c, "orders", 0, 20, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Durable: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	other := dialNode(t, n, client.Options{})
	_, err = other.Subscribe(ctx, "orders", client.SubscribeOptions{Durable: "worker"})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeConflict || !containsAll(err.Error(), `"worker"`, "node n1", "since", "127.0.0.1") {
		t.Fatalf("second subscriber: %v", err)
	}
	t.Logf("refused: %v", err)
	seen := map[uint64]bool{}
	for range 10 {
		r, err := first.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen[r.Offset] = true
		if err := first.Ack(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := other.Subscribe(ctx, "orders", client.SubscribeOptions{Durable: "worker"})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	defer second.Close()
	for want := uint64(10); want < 20; want++ {
		r, err := second.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != want || seen[r.Offset] {
			t.Fatalf("second subscriber got offset %d, want %d (after the last ACK, never one the first got)", r.Offset, want)
		}
	}
	// Another durable name is independent.
	s3, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	s3.Close()
}

// TestCommitConfirmsAcks: Commit returns once the node stored every ACK before it, so a
// consumer that drops its connection right after (no Close) resumes after its last ACK.
// Repeated, since without the confirmation the position was lost about half the time.
func TestCommitConfirmsAcks(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	groupPublish(t, c, "orders", 0, 20, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 10 {
		name := "d" + strconv.Itoa(i)
		cc := dialNode(t, n, client.Options{})
		sub, err := cc.Subscribe(ctx, "orders", client.SubscribeOptions{Durable: name})
		if err != nil {
			t.Fatal(err)
		}
		var last client.Record
		for range 5 + i {
			if last, err = sub.Next(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := sub.Ack(last); err != nil {
			t.Fatal(err)
		}
		if err := sub.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		cc.Close() // no Subscription.Close: the connection just ends
		pos, ok, err := n.Log().Position(name, "orders")
		if err != nil || !ok || pos != last.Offset {
			t.Fatalf("%s: stored position %d (%v, %v), want %d", name, pos, ok, err, last.Offset)
		}
	}
	// Commit on a group, with Next not running: records read past are kept for Next.
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub.Ack(r)
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := sub.Next(ctx)
	if err != nil || next.Offset != r.Offset+1 {
		t.Fatalf("after Commit, Next: offset %d, %v; want %d", next.Offset, err, r.Offset+1)
	}
	sub.Close()
}

// TestExclusiveStandbyTakesOver: a standby of a held durable waits, gets nothing while the
// first subscriber is active, and takes over when it ends, after its last ACK.
func TestExclusiveStandbyTakesOver(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	groupPublish(t, c, "orders", 0, 20, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Durable: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	standbyTakesOver(ctx, t, first, func() (*client.Subscription, error) { // grouprelay_test.go
		return dialNode(t, n, client.Options{}).Subscribe(ctx, "orders", client.SubscribeOptions{Durable: "worker", Standby: true})
	})
}

// TestConsumersPerTenant: durables and groups are namespaced per tenant: two tenants using
// one name hold two durables and two groups, each reading its own records; the dead-letter
// topic is the tenant's, and needs its publish grant.
func TestConsumersPerTenant(t *testing.T) {
	n := tenantNode(t)
	acme, globex := mustDialAs(t, n, acmeToken), mustDialAs(t, n, globexToken)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	groupPublish(t, acme, "orders.eu", 0, 3, nil)
	groupPublish(t, globex, "orders.eu", 0, 1, nil)
	for _, opts := range []client.SubscribeOptions{{Durable: "same"}, {Group: "same"}} {
		a, err := acme.Subscribe(ctx, "orders.eu", opts)
		if err != nil {
			t.Fatal(err)
		}
		g, err := globex.Subscribe(ctx, "orders.eu", opts)
		if err != nil {
			t.Fatalf("%+v: globex refused while acme holds the name: %v", opts, err)
		}
		r, err := g.Next(ctx)
		if err != nil || string(r.Payload) != "0" || r.Topic != "orders.eu" {
			t.Fatalf("%+v: globex got %q on %q, %v", opts, r.Payload, r.Topic, err)
		}
		a.Close()
		g.Close()
	}
	// The reader of acme may not publish: a dead-letter topic is refused.
	reader := mustDialAs(t, n, readerToken)
	_, err := reader.Subscribe(ctx, "orders.eu", client.SubscribeOptions{Group: "r", DeadLetter: "orders.dlq"})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeForbidden || !strings.Contains(err.Error(), "dead-letter") {
		t.Fatalf("dead-letter topic without a publish grant: %v", err)
	}
}
