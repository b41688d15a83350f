package node

// Sentences of docs/protocol.md checked on the wire, one test each, named after what the
// document says. A client written from the document alone relies on them.

import (
	"io"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
)

// TestAckInsideGapIsTaken: "An ACK is wrong when ... offset is not below the offset after the
// last record (or GAP) of that topic sent on it." A durable whose remaining records were all
// deleted acknowledges inside the GAP, and so stores a position past them: it is not sent
// the same GAP again when it resumes.
func TestAckInsideGapIsTaken(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "gap.t", 0, 6)

	// The durable acknowledges offsets 0 and 1, and its stream ends with the position stored.
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "gap.t", Durable: "d"})
	readRecords(t, s, 6)
	s.send(&wire.Ack{Index: 0, Offset: 1})
	s.str.Close()
	drainToEOF(t, s)

	// Records 2-5 go: the resumed durable is sent GAP [2, 6) and nothing else.
	if f := rc.open(&wire.TopicRemove{Topic: "gap.t", Op: wire.RemovePurge, Flags: wire.ManageForce}).next(); f.Type() != wire.TypeDone {
		t.Fatalf("purge: got %s %+v", f.Type(), f)
	}
	s = subscribe(t, rc, &wire.Subscribe{Pattern: "gap.t", Durable: "d"})
	if f := s.next(); f.Type() != wire.TypeTopic {
		t.Fatalf("after SUBSCRIBED: got %s %+v, want TOPIC", f.Type(), f)
	}
	if g, ok := s.next().(*wire.Gap); !ok || g.From != 2 || g.To != 6 {
		t.Fatalf("want GAP [2, 6), got %+v", g)
	}
	s.send(&wire.Ack{Index: 0, Offset: 5}, &wire.Commit{Seq: 1})
	switch f := s.next().(type) {
	case *wire.Committed:
	case *wire.ErrorFrame:
		t.Fatalf("ACK 5 inside GAP [2, 6): %v", f.AsError())
	default:
		t.Fatalf("after ACK and COMMIT: got %s %+v", f.Type(), f)
	}
	s.str.Close()
	drainToEOF(t, s)

	// Resumed again, the durable is at the head: CAUGHT_UP, no GAP.
	s = subscribe(t, rc, &wire.Subscribe{Pattern: "gap.t", Durable: "d", Flags: wire.SubscribeCaughtUp})
	if f := s.next(); f.Type() != wire.TypeCaughtUp {
		t.Fatalf("resumed after the gap: got %s %+v, want CAUGHT_UP", f.Type(), f)
	}
}

// drainToEOF reads s until the node's FIN, failing on an ERROR.
func drainToEOF(t *testing.T, s *rawStream) {
	t.Helper()
	for {
		f, err := s.read(10 * time.Second)
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("waiting for the node's FIN: %v", err)
		}
		if e, ok := f.(*wire.ErrorFrame); ok {
			t.Fatalf("waiting for the node's FIN: %v", e.AsError())
		}
	}
}
