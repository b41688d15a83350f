package node

import (
	"fmt"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
)

// PUBLISH_BATCH: each entry is answered in order, as a PUBLISH of its seq would be; runs of
// successes come back as PUBLISH_ACKS (one per run of consecutive seqs that shares an append),
// a refused entry as its own PUBLISH_ERROR, and the records land at the acked offsets. A
// PUBLISH on the same stream afterwards still works.
func TestPublishBatch(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxPayload = 64 })
	rc := mustDial(t, n)
	batch := func(seq uint64, topic string, payloads ...string) *wire.PublishBatch {
		b := &wire.PublishBatch{Seq: seq, Topic: topic}
		for i, p := range payloads {
			b.Publishes = append(b.Publishes, wire.Publish{Seq: seq + uint64(i), Topic: topic, Payload: []byte(p)})
		}
		return b
	}
	big := string(make([]byte, 65))
	s := rc.open(
		batch(1, "pb.a", "a0", "a1", "a2"),
		batch(4, "pb.a", "a3", big, "a5"), // the middle one is too large
		batch(10, "pb.b", "b0"),           // a seq gap is allowed
		&wire.Publish{Seq: 11, Topic: "pb.a", Payload: []byte("a6")},
	)
	s.str.Close()

	type answer struct {
		seq, offset uint64
		code        wire.Code
	}
	var got []answer
	for len(got) < 8 {
		switch f := s.next().(type) {
		case *wire.PublishAcks:
			for k := range f.Count {
				got = append(got, answer{f.Seq + k, f.Offset + k, 0})
			}
		case *wire.PublishAck:
			got = append(got, answer{f.Seq, f.Offset, 0})
		case *wire.PublishError:
			got = append(got, answer{f.Seq, 0, f.Code})
		default:
			t.Fatalf("unexpected %#v", f)
		}
	}
	want := []answer{{1, 0, 0}, {2, 1, 0}, {3, 2, 0}, {4, 3, 0}, {5, 0, wire.CodeTooLarge}, {6, 4, 0}, {10, 0, 0}, {11, 5, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers\n got %v\nwant %v", got, want)
	}
	recs, err := n.Log().Read("pb.a", 0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var payloads []string
	for _, r := range recs {
		payloads = append(payloads, string(r.Payload))
	}
	if fmt.Sprint(payloads) != "[a0 a1 a2 a3 a5 a6]" {
		t.Fatalf("pb.a holds %v", payloads)
	}
}

// A stream that never sent PUBLISH_BATCH gets PUBLISH_ACK frames only, as before the frame
// existed, however its publishes are batched into appends.
func TestPublishWithoutBatchGetsSingleAcks(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	frames := make([]wire.Frame, 200)
	for i := range frames {
		frames[i] = &wire.Publish{Seq: uint64(i), Topic: "pb.c", Payload: []byte("x")}
	}
	s := rc.open(frames...)
	s.str.Close()
	for i := range frames {
		a, ok := s.next().(*wire.PublishAck)
		if !ok || a.Seq != uint64(i) || a.Offset != uint64(i) {
			t.Fatalf("answer %d: %#v", i, a)
		}
	}
}
