package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
)

// An unknown start kind is answered with the documented code 13 (invalid argument), naming
// the kind, not as a malformed frame.
func TestSubscribeUnknownStartKind(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	s := rc.open(&wire.Subscribe{Pattern: "a", Start: 9})
	if e := s.expectError(); e.Code != wire.CodeInvalidArgument || !strings.Contains(e.Message, "start kind 9") {
		t.Fatalf("got %v, want code %d naming the kind", e, wire.CodeInvalidArgument)
	}
}

// publishRaw publishes count records to topic on a raw stream and waits for their acks.
func publishRaw(t *testing.T, rc *rawConn, topic string, count int) {
	t.Helper()
	pub := rc.open()
	for i := range count {
		pub.send(&wire.Publish{Seq: uint64(i), Topic: topic, Payload: []byte{byte(i)}})
	}
	for range count {
		if _, ok := pub.next().(*wire.PublishAck); !ok {
			t.Fatal("publish not acknowledged")
		}
	}
}

// A client that did not set the CAUGHT_UP flag never gets the frame (an older client knows
// no such type); one that did gets it right after the records stored at set-up.
func TestCaughtUpOnlyWhenAsked(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	for i, flags := range []uint64{0, wire.SubscribeCaughtUp} {
		topic := fmt.Sprintf("cu.t%d", i)
		publishRaw(t, rc, topic, 3)
		s := rc.open(&wire.Subscribe{Pattern: topic, Flags: flags})
		if _, ok := s.next().(*wire.Subscribed); !ok {
			t.Fatal("no SUBSCRIBED")
		}
		records := 0
		for records < 3 {
			switch f := s.next().(type) {
			case *wire.Topic:
			case *wire.Record:
				records++
			default:
				t.Fatalf("flags %d: unexpected %s", flags, f.Type())
			}
		}
		if flags != 0 {
			if cu, ok := s.next().(*wire.CaughtUp); !ok || cu.Topics != 1 {
				t.Fatalf("after the 3 records: %#v, want CAUGHT_UP of 1 topic", cu)
			}
		}
		publishRaw(t, rc, topic, 1)
		if f, ok := s.next().(*wire.Record); !ok || f.Offset < 3 {
			t.Fatalf("flags %d: after the backlog got %#v, want the new RECORD", flags, f)
		}
		s.str.Close()
	}
}

// A wrong ACK ends the subscription with code 13: one of a topic index the stream never
// bound, or of a record not yet delivered on it.
func TestWrongAckEndsSubscription(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishRaw(t, rc, "wa.t", 2)
	for _, ack := range []*wire.Ack{{Index: 5, Offset: 0}, {Index: 0, Offset: 2}} {
		s := rc.open(&wire.Subscribe{Pattern: "wa.t"})
		for range 4 { // SUBSCRIBED, TOPIC, two RECORDs
			s.next()
		}
		s.send(ack)
		if e := s.expectError(); e.Code != wire.CodeInvalidArgument || !strings.Contains(e.Message, "no such record") {
			t.Fatalf("ACK %+v: got %v, want code %d", ack, e, wire.CodeInvalidArgument)
		}
	}
}

// A frame over the frame-body limit after SUBSCRIBE ends the subscription with ERROR 5, as
// it does as a stream's first frame and on a publish stream; one that does not decode with
// ERROR 1.
func TestSubscriptionFrameOverLimit(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.AblationSharedStream = true })
	rc := mustDial(t, n)
	for _, region := range []string{"", ablationSharedRegion} {
		s := rc.open(&wire.Subscribe{Pattern: "a", Region: region})
		if _, ok := s.next().(*wire.Subscribed); !ok {
			t.Fatalf("region %q: no SUBSCRIBED", region)
		}
		if _, err := s.str.Write([]byte{byte(wire.TypeAck), 0xff, 0xff, 0xff, 0xff, 0xab}); err != nil {
			t.Fatal(err)
		}
		if e := s.expectError(); e.Code != wire.CodeTooLarge {
			t.Fatalf("region %q: ACK frame of 4 GiB: got %v, want code %d (too large)", region, e, wire.CodeTooLarge)
		}
		s = rc.open(&wire.Subscribe{Pattern: "a", Region: region})
		if _, ok := s.next().(*wire.Subscribed); !ok {
			t.Fatalf("region %q: no SUBSCRIBED", region)
		}
		if _, err := s.str.Write([]byte{byte(wire.TypeAck), 0, 0, 0, 1, 0x80}); err != nil {
			t.Fatal(err)
		}
		if e := s.expectError(); e.Code != wire.CodeProtocol {
			t.Fatalf("region %q: truncated ACK: got %v, want code %d (protocol)", region, e, wire.CodeProtocol)
		}
	}
}
