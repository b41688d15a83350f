package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node/nodetest"
)

// Close returning nil means the ACKs made before it are stored: a new durable subscription
// resumes right after the last one, every time, also when the Conn is closed at once after
// Close and when another goroutine is blocked in Next meanwhile.
func TestCloseStoresAcks(t *testing.T) {
	n := newTestNode(t)
	pub := dial(t, n)
	ctx := testCtx(t)
	const rounds = 20
	for i := range rounds {
		publishN(t, pub, "close.acks", fmt.Sprint(i), 1)
		c := dial(t, n)
		s, err := c.Subscribe(ctx, "close.acks", client.SubscribeOptions{Durable: "d"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != uint64(i) {
			t.Fatalf("round %d: resumed at offset %d: the ACK of %d was lost", i, r.Offset, i-1)
		}
		if err := s.Ack(r); err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error, 1)
		if i%2 == 1 { // a reader waiting for the next record while Close runs
			go func() { _, err := s.Next(ctx); blocked <- err }()
		}
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", i, err)
		}
		if i%2 == 1 {
			if err := <-blocked; !errors.Is(err, client.ErrClosed) {
				t.Fatalf("round %d: the blocked Next returned %v, want ErrClosed", i, err)
			}
		}
		c.Close()
	}
}

// The node stores the highest acknowledged offset: a lower ACK after a higher one, on the
// same stream or on a later one, is accepted and changes nothing.
func TestHighestAckWins(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	publishN(t, c, "hi.ack", "r", 12)
	s, err := c.Subscribe(ctx, "hi.ack", client.SubscribeOptions{Durable: "h"})
	if err != nil {
		t.Fatal(err)
	}
	rs := nextN(t, s, 10)
	for _, off := range []int{8, 3} {
		if err := s.Ack(rs[off]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := c.Subscribe(ctx, "hi.ack", client.SubscribeOptions{Durable: "h"})
	if err != nil {
		t.Fatal(err)
	}
	r := nextN(t, s2, 1)[0]
	if r.Offset != 9 {
		t.Fatalf("ACK 8 then ACK 3: resumed at %d, want 9", r.Offset)
	}
	if err := s2.Ack(client.Record{Topic: "hi.ack", Offset: 2}); err != nil { // below the stored position
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3, err := c.Subscribe(ctx, "hi.ack", client.SubscribeOptions{Durable: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if r := nextN(t, s3, 1)[0]; r.Offset != 9 {
		t.Fatalf("a later stream's ACK 2: resumed at %d, want 9", r.Offset)
	}
}

// An explicit start offset past a topic's head is refused, naming the topic and its head;
// the head itself waits for the next record.
func TestStartPastHead(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	publishN(t, c, "past.head", "r", 5)
	_, err := c.Subscribe(ctx, "past.head", client.SubscribeOptions{From: client.AtOffset(7)})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeOffsetOutOfRange || !strings.Contains(e.Message, `"past.head"`) || !strings.Contains(e.Message, "offset 5") {
		t.Fatalf("offset 7 of a topic with 5 records: %v, want CodeOffsetOutOfRange naming the topic and head 5", err)
	}
	s, err := c.Subscribe(ctx, "past.head", client.SubscribeOptions{From: client.AtOffset(5)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	publishN(t, c, "past.head", "late", 1)
	if r := nextN(t, s, 1)[0]; r.Offset != 5 || string(r.Payload) != "late-0" {
		t.Fatalf("from the head: got %d %q, want the next record, 5", r.Offset, r.Payload)
	}
}

// With NotifyCaughtUp, reading to the end needs no timeout: Next returns ErrCaughtUp right
// after the last record stored at set-up, over every topic the pattern matched then.
func TestCaughtUp(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	want := map[string]int{"cu.a": 300, "cu.b": 1, "cu.c": 4500}
	total := 0
	for topic, k := range want {
		publishN(t, c, topic, topic, k)
		total += k
	}
	for _, pattern := range []string{"cu.a", "cu.*"} {
		s, err := c.Subscribe(ctx, pattern, client.SubscribeOptions{NotifyCaughtUp: true})
		if err != nil {
			t.Fatal(err)
		}
		got := readToCaughtUp(t, s)
		select {
		case <-s.CaughtUp():
		default:
			t.Fatalf("%s: CaughtUp not closed after ErrCaughtUp", pattern)
		}
		for topic, k := range want {
			if (pattern == "cu.*" || topic == pattern) && got[topic] != k {
				t.Fatalf("%s: caught up with %d records of %s, want %d (got %v)", pattern, got[topic], topic, k, got)
			}
		}
		// The subscription goes on.
		publishN(t, c, "cu.a", "after", 1)
		want["cu.a"]++
		if r := nextN(t, s, 1)[0]; string(r.Payload) != "after-0" {
			t.Fatalf("%s: after caught up got %q", pattern, r.Payload)
		}
		s.Close()
	}
	// Nothing to catch up: latest, and a pattern matching no topic.
	for _, sub := range []struct {
		pattern string
		from    client.Start
	}{{"cu.*", client.Latest}, {"none.>", client.Earliest}} {
		s, err := c.Subscribe(ctx, sub.pattern, client.SubscribeOptions{From: sub.from, NotifyCaughtUp: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(ctx); !errors.Is(err, client.ErrCaughtUp) {
			t.Fatalf("%s from %s: %v, want ErrCaughtUp first", sub.pattern, sub.from, err)
		}
		s.Close()
	}
}

// CAUGHT_UP covers the topics other nodes of the region own too: the node the client is
// connected to says it once its own topics and every upstream have caught up.
func TestCaughtUpAcrossNodes(t *testing.T) {
	n1, _, _ := nodetest.StartTwo(t)
	c := dial(t, &testNode{Node: n1})
	ctx := testCtx(t)
	on1, on2 := nodetest.OwnedBy("cu2", "n1", "n1", "n2"), nodetest.OwnedBy("cu2", "n2", "n1", "n2")
	waitRelay(t, c, on2) // one record
	publishN(t, c, on1, "a", 50)
	publishN(t, c, on2, "b", 70)
	for pattern, want := range map[string]map[string]int{
		"cu2.*": {on1: 50, on2: 71},
		on2:     {on2: 71},
	} {
		s, err := c.Subscribe(ctx, pattern, client.SubscribeOptions{NotifyCaughtUp: true})
		if err != nil {
			t.Fatal(err)
		}
		got := readToCaughtUp(t, s)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: caught up with %v, want %v", pattern, got, want)
		}
		s.Close()
	}
}

// readToCaughtUp reads s until ErrCaughtUp and returns the records it got per topic.
func readToCaughtUp(t *testing.T, s *client.Subscription) map[string]int {
	t.Helper()
	ctx := testCtx(t)
	got := map[string]int{}
	for {
		r, err := s.Next(ctx)
		if errors.Is(err, client.ErrCaughtUp) {
			return got
		}
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got[r.Topic]++
	}
}
