package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// answer is one publish's answer, PUBLISH_ACKS expanded into one per seq.
type answer struct {
	seq    uint64
	offset uint64
	code   wire.Code // 0 for an ack
	msg    string
}

// readAnswers reads count answers from a publish stream, then expects its end (FIN).
func readAnswers(t *testing.T, s *quic.Stream, r *wire.Reader, count int) []answer {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	var out []answer
	for len(out) < count {
		f, err := r.Read()
		if err != nil {
			t.Fatalf("after %d answers of %d: %v", len(out), count, err)
		}
		switch f := f.(type) {
		case *wire.PublishAck:
			out = append(out, answer{seq: f.Seq, offset: f.Offset})
		case *wire.PublishAcks:
			for k := range f.Count {
				out = append(out, answer{seq: f.Seq + k, offset: f.Offset + k})
			}
		case *wire.PublishError:
			out = append(out, answer{seq: f.Seq, code: f.Code, msg: f.Message})
		default:
			t.Fatalf("answer %d: %s %+v: the stream should go on past a refused publish", len(out), f.Type(), f)
		}
	}
	if f, err := r.Read(); err == nil {
		t.Fatalf("after the %d answers: %s %+v", count, f.Type(), f)
	}
	return out
}

// badPublish is a publish over one per-publish limit, and what its PUBLISH_ERROR must say.
type badPublish struct {
	name string
	pub  wire.Publish
	code wire.Code
	says string // the limit and the value, in the message
}

func badPublishes() []badPublish {
	many := make([]wire.Header, 65)
	for i := range many {
		many[i].Key = fmt.Sprint("h", i)
	}
	return []badPublish{
		{"payload", wire.Publish{Topic: "lim", Payload: make([]byte, 1025)}, wire.CodeTooLarge, "1025 bytes is over the limit of 1024"},
		{"header bytes", wire.Publish{Topic: "lim", Headers: []wire.Header{{Key: "k", Value: make([]byte, 300)}}}, wire.CodeTooLarge, "headers of 301 bytes (keys and values) are over the limit of 256 bytes"},
		{"header count", wire.Publish{Topic: "lim", Headers: many}, wire.CodeTooLarge, "65 headers are over the limit of 64"},
		{"header key", wire.Publish{Topic: "lim", Headers: []wire.Header{{Key: strings.Repeat("k", 4097)}}}, wire.CodeTooLarge, "header key of 4097 bytes is over the limit of 4096"},
		{"producer id", wire.Publish{Topic: "lim", ProducerID: strings.Repeat("p", 4097), Sequence: 1}, wire.CodeTooLarge, "producer id of 4097 bytes is over the limit of 4096"},
		{"topic length", wire.Publish{Topic: strings.Repeat("t", 256)}, wire.CodeInvalidTopic, "256 bytes is over the limit of 255"},
		{"topic over any string", wire.Publish{Topic: strings.Repeat("t", 5000)}, wire.CodeInvalidTopic, "5000 bytes is over the limit of 255"},
		{"topic grammar", wire.Publish{Topic: "lim..x"}, wire.CodeInvalidTopic, "lim..x"},
	}
}

// Every per-publish limit refuses that publish alone: pipelined with good publishes before
// and after it on one stream, the bad one gets PUBLISH_ERROR with its limit's code and a
// message naming the limit and the value, and every good one is stored and acknowledged in
// order (dense offsets in seq order).
func TestPublishLimitRefusesOnePublishStreamGoesOn(t *testing.T) {
	n, _ := nodetest.Start(t, func(c *node.Config) { c.MaxPayload, c.MaxHeaderBytes = 1024, 256 })
	a := dialAbuse(t, n)
	bads := badPublishes()
	var raw []byte
	seq := uint64(1)
	want := map[uint64]badPublish{}
	good := func() {
		raw = wire.Append(raw, &wire.Publish{Seq: seq, Topic: "lim", Payload: []byte(fmt.Sprint("good ", seq))})
		seq++
	}
	good()
	for _, b := range bads {
		p := b.pub
		p.Seq = seq
		want[seq] = b
		raw = wire.Append(raw, &p)
		seq++
		good()
	}
	s, r := a.stream(raw)
	s.Close()
	got := readAnswers(t, s, r, int(seq-1))
	next := uint64(0)
	for i, g := range got {
		if g.seq != uint64(i+1) {
			t.Fatalf("answer %d is for seq %d: answers out of order", i, g.seq)
		}
		b, bad := want[g.seq]
		switch {
		case bad && (g.code != b.code || !strings.Contains(g.msg, b.says)):
			t.Errorf("%s: answered code %d %q, want code %d naming %q", b.name, g.code, g.msg, b.code, b.says)
		case !bad && g.code != 0:
			t.Errorf("good publish %d refused: %d %s", g.seq, g.code, g.msg)
		case !bad && g.offset != next:
			t.Errorf("good publish %d stored at offset %d, want %d", g.seq, g.offset, next)
		case !bad:
			next++
		}
	}
	if next != uint64(len(bads)+1) {
		t.Fatalf("%d good publishes stored, want %d", next, len(bads)+1)
	}
	checkHealthy(t, n, "after publishes over every limit")
}

// In a PUBLISH_BATCH, an entry over a limit is refused alone: the entries before and after
// it are stored and acknowledged in order; a batch whose topic is bad refuses every entry;
// the stream goes on after both.
func TestPublishBatchEntryOverLimit(t *testing.T) {
	n, _ := nodetest.Start(t, func(c *node.Config) { c.MaxPayload = 1024 })
	a := dialAbuse(t, n)
	ok := func(s string) wire.Publish { return wire.Publish{Payload: []byte(s)} }
	raw := wire.Append(nil, &wire.PublishBatch{Seq: 1, Topic: "batch", Publishes: []wire.Publish{
		ok("a"), ok("b"), {Payload: make([]byte, 1025)}, ok("c"), ok("d"),
	}})
	raw = wire.Append(raw, &wire.PublishBatch{Seq: 6, Topic: "batch..bad", Publishes: []wire.Publish{ok("x"), ok("y")}})
	raw = wire.Append(raw, &wire.Publish{Seq: 8, Topic: "batch", Payload: []byte("e")})
	s, r := a.stream(raw)
	s.Close()
	got := readAnswers(t, s, r, 8)
	wantAck := map[uint64]uint64{1: 0, 2: 1, 4: 2, 5: 3, 8: 4} // seq -> offset
	for i, g := range got {
		if g.seq != uint64(i+1) {
			t.Fatalf("answer %d is for seq %d", i, g.seq)
		}
		if off, isAck := wantAck[g.seq]; isAck {
			if g.code != 0 || g.offset != off {
				t.Errorf("seq %d: %+v, want ack at offset %d", g.seq, g, off)
			}
			continue
		}
		wantCode := wire.CodeInvalidTopic
		if g.seq == 3 {
			wantCode = wire.CodeTooLarge
		}
		if g.code != wantCode {
			t.Errorf("seq %d: %+v, want code %d", g.seq, g, wantCode)
		}
	}
}

// Framing errors still end the stream: a frame over the frame-body limit is answered with
// ERROR 5 after the answers to the publishes before it, then FIN, and nothing after it is
// read (STOP_SENDING 0x1).
func TestPublishFrameOverLimitEndsStream(t *testing.T) {
	n, _ := nodetest.Start(t, func(c *node.Config) { c.MaxPayload, c.MaxHeaderBytes = 1024, 256 })
	a := dialAbuse(t, n)
	raw := wire.Append(nil, &wire.Publish{Seq: 1, Topic: "frame", Payload: []byte("x")})
	big := wire.Append(nil, &wire.Publish{Seq: 2, Topic: "frame", Payload: make([]byte, 1024+256+64<<10+1)})
	raw = append(raw, big...)
	raw = wire.Append(raw, &wire.Publish{Seq: 3, Topic: "frame", Payload: []byte("y")})
	stoppedByNode := func(err error) bool {
		var se *quic.StreamError
		return errors.As(err, &se) && se.Remote && se.ErrorCode == wire.AppProtocol
	}
	// The node stops reading at the oversized frame's length, so the write of raw may end
	// with its STOP_SENDING before all of the frame is handed to QUIC.
	s, r := a.stream(nil)
	if _, err := s.Write(raw); err != nil && !stoppedByNode(err) {
		t.Fatalf("write: %v", err)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := r.Read()
	if ack, isAck := f.(*wire.PublishAck); err != nil || !isAck || ack.Seq != 1 {
		t.Fatalf("first answer: %+v, %v", f, err)
	}
	if e := readError(t, s, r); e.Code != wire.CodeTooLarge || !strings.Contains(e.Message, fmt.Sprint(1024+256+64<<10)) {
		t.Fatalf("oversized frame: %v, want ERROR 5 naming the frame limit", e)
	}
	if f, err := r.Read(); err != io.EOF {
		t.Fatalf("after the ERROR: %+v, %v, want the node's FIN", f, err)
	}
	select {
	case <-s.Context().Done(): // the write side ended: by the node's STOP_SENDING, checked next
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not stop reading the stream (want STOP_SENDING 0x1)")
	}
	if err := context.Cause(s.Context()); !stoppedByNode(err) {
		t.Fatalf("write side ended by %v, want the node's STOP_SENDING 0x1", err)
	}
}

// Through a relay: publishes to a topic another node of the region owns, with bad ones
// between them, are refused by the relaying node in their place in the answer order, and the
// good ones are stored on the owner and acknowledged in order.
func TestPublishLimitThroughRelay(t *testing.T) {
	n1, _, _ := nodetest.StartTwo(t)
	topic := nodetest.OwnedBy("relayed", "n2", "n1", "n2")
	a := dialAbuse(t, n1)
	many := make([]wire.Header, 65)
	var raw []byte
	raw = wire.Append(raw, &wire.Publish{Seq: 1, Topic: topic, Payload: []byte("a")})
	raw = wire.Append(raw, &wire.Publish{Seq: 2, Topic: topic, Headers: many})
	raw = wire.Append(raw, &wire.Publish{Seq: 3, Topic: topic, Payload: []byte("b")})
	raw = wire.Append(raw, &wire.Publish{Seq: 4, Topic: topic + "..", Payload: []byte("c")})
	raw = wire.Append(raw, &wire.Publish{Seq: 5, Topic: topic, Payload: []byte("d")})
	s, r := a.stream(raw)
	s.Close()
	got := readAnswers(t, s, r, 5)
	want := []answer{{seq: 1, offset: 0}, {seq: 2, code: wire.CodeTooLarge}, {seq: 3, offset: 1}, {seq: 4, code: wire.CodeInvalidTopic}, {seq: 5, offset: 2}}
	for i, g := range got {
		if w := want[i]; g.seq != w.seq || g.code != w.code || (w.code == 0 && g.offset != w.offset) {
			t.Errorf("answer %d: %+v, want %+v", i, g, w)
		}
	}
}
