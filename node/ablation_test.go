package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/sharedstream"
)

// A node that did not opt in refuses a shared stream instead of treating the marker as a
// region.
func TestSharedStreamRefusedByDefault(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	s := rc.open(&wire.Subscribe{Pattern: "a", Region: ablationSharedRegion})
	if e := s.expectError(); e.Code != wire.CodeForbidden {
		t.Fatalf("got %v, want code %d (forbidden)", e, wire.CodeForbidden)
	}
}

// Three subscriptions on one shared stream, two of them to the same topic: each gets its
// topics bound under its own number (index>>32) and every record in order, interleaved on
// the one stream; ACKs are checked against what the stream delivered.
func TestSharedStreamDeliversEverySubscription(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.AblationSharedStream = true })
	rc := mustDial(t, n)
	pub := rc.open()
	const perTopic = 50
	for i := range perTopic {
		pub.send(&wire.Publish{Seq: uint64(2 * i), Topic: "t.a", Payload: fmt.Appendf(nil, "a%d", i)},
			&wire.Publish{Seq: uint64(2*i + 1), Topic: "t.b", Payload: fmt.Appendf(nil, "b%d", i)})
	}
	for range 2 * perTopic {
		if _, ok := pub.next().(*wire.PublishAck); !ok {
			t.Fatal("publish not acknowledged")
		}
	}

	s := rc.open(&wire.Subscribe{Pattern: "t.a", Region: ablationSharedRegion})
	s.send(&wire.Subscribe{Pattern: "t.*"}, &wire.Subscribe{Pattern: "t.b", Region: ablationSharedRegion})
	type key struct {
		sub   uint64
		topic string
	}
	topics := map[uint64]string{}
	next := map[key]int{}
	subscribed := 0
	want := map[key]int{{0, "t.a"}: perTopic, {1, "t.a"}: perTopic, {1, "t.b"}: perTopic, {2, "t.b"}: perTopic}
	got := 0
	for got < 4*perTopic {
		switch f := s.next().(type) {
		case *wire.Subscribed:
			subscribed++
		case *wire.Topic:
			if _, dup := topics[f.Index]; dup {
				t.Fatalf("index %d bound twice", f.Index)
			}
			topics[f.Index] = f.Name
		case *wire.Record:
			name, ok := topics[f.Index]
			if !ok {
				t.Fatalf("record with unbound index %d", f.Index)
			}
			k := key{f.Index >> sharedstream.IndexBits, name}
			if _, ok := want[k]; !ok {
				t.Fatalf("subscription %d got a record of %s", k.sub, name)
			}
			if f.Offset != uint64(next[k]) || string(f.Payload) != fmt.Sprintf("%c%d", name[2], next[k]) {
				t.Fatalf("subscription %d topic %s: got offset %d %q, want offset %d", k.sub, name, f.Offset, f.Payload, next[k])
			}
			next[k]++
			got++
		default:
			t.Fatalf("unexpected %s", f.Type())
		}
	}
	if subscribed != 3 {
		t.Fatalf("%d SUBSCRIBED frames, want 3", subscribed)
	}
	for k, w := range want {
		if next[k] != w {
			t.Fatalf("subscription %d topic %s: %d records, want %d", k.sub, k.topic, next[k], w)
		}
	}
	// A valid ACK is accepted; one for a record never sent ends the stream.
	for idx := range topics {
		s.send(&wire.Ack{Index: idx, Offset: perTopic - 1})
	}
	var any uint64
	for idx := range topics {
		any = idx
		break
	}
	s.send(&wire.Ack{Index: any, Offset: perTopic})
	if e := s.expectError(); e.Code != wire.CodeInvalidArgument {
		t.Fatalf("got %v, want code %d", e, wire.CodeInvalidArgument)
	}
}

// A shared stream carries no region replay: a later SUBSCRIBE naming a region is refused.
func TestSharedStreamRefusesRegion(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.AblationSharedStream = true })
	rc := mustDial(t, n)
	s := rc.open(&wire.Subscribe{Pattern: "a", Region: ablationSharedRegion})
	s.send(&wire.Subscribe{Pattern: "a", Region: "elsewhere"})
	if e := s.expectError(); e.Code != wire.CodeInvalidArgument || !strings.Contains(e.Message, "elsewhere") {
		t.Fatalf("got %v, want code %d naming the region", e, wire.CodeInvalidArgument)
	}
}

// CAUGHT_UP has no index to route it by, so a shared stream never carries one, even for a
// SUBSCRIBE that asks for it: after the record that was the head at set-up comes the next
// record appended, not a CAUGHT_UP for an unknown subscription.
func TestSharedStreamSendsNoCaughtUp(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.AblationSharedStream = true })
	rc := mustDial(t, n)
	pub := rc.open(&wire.Publish{Seq: 0, Topic: "t.a", Payload: []byte("0")})
	if _, ok := pub.next().(*wire.PublishAck); !ok {
		t.Fatal("publish not acknowledged")
	}
	s := rc.open(&wire.Subscribe{Pattern: "t.a", Region: ablationSharedRegion, Flags: wire.SubscribeCaughtUp})
	for offset := uint64(0); offset < 2; {
		switch f := s.next().(type) {
		case *wire.Subscribed, *wire.Topic:
		case *wire.Record:
			if f.Offset != offset {
				t.Fatalf("record at offset %d, want %d", f.Offset, offset)
			}
			if offset == 0 {
				pub.send(&wire.Publish{Seq: 1, Topic: "t.a", Payload: []byte("1")})
				if _, ok := pub.next().(*wire.PublishAck); !ok {
					t.Fatal("publish not acknowledged")
				}
			}
			offset++
		default:
			t.Fatalf("unexpected %s on a shared stream", f.Type())
		}
	}
}
