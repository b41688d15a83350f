package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// sampleFrames has one frame of every type, with every field set, plus edge values.
func sampleFrames() []Frame {
	hs := []Header{{Key: "k", Value: []byte("v")}, {Key: "content-type", Value: []byte("text/plain")}}
	return []Frame{
		&Hello{Version: 1, Client: "cli", Token: "secret"},
		&Welcome{Version: 1, Node: "n1", Region: "eu", MaxPayload: 1 << 20, MaxFrame: 2 << 20, MaxSubscriptions: 1000, MaxStreams: 2000},
		&ErrorFrame{Code: CodeInvalidTopic, Message: `invalid topic "a..b"`},
		&Publish{Seq: 7, Topic: "orders.eu", ProducerID: "p1", Sequence: 42, Headers: hs, Payload: []byte("hello")},
		&Publish{Seq: 0, Topic: "t"},
		&PublishAck{Seq: 7, Offset: 1<<63 + 5, Time: 1_700_000_000_000_000_000},
		&PublishAck{Seq: 1, Offset: 0, Time: -1},
		&PublishAck{Seq: 8, Offset: 3, Time: 1_700_000_000_000_000_001, Flags: AckDuplicate},
		&PublishError{Seq: 10, Code: CodeSequence, Message: `sequence 3 of producer "p" on topic "a" is older than the node's de-duplication window`},
		&PublishError{Seq: 9, Code: CodeTooLarge, Message: "payload 2000000 bytes, limit 1048576"},
		&PublishBatch{Seq: 11, Topic: "orders.eu", Publishes: []Publish{
			{Seq: 11, Topic: "orders.eu", Payload: []byte("one")},
			{Seq: 12, Topic: "orders.eu", ProducerID: "p1", Sequence: 43, Headers: hs, Payload: []byte("two")},
			{Seq: 13, Topic: "orders.eu"},
		}},
		&PublishAcks{Seq: 11, Count: 3, Offset: 1 << 40, Time: 1_700_000_000_000_000_000},
		&Subscribe{Pattern: "orders.>", Start: StartTime, StartValue: 123, Durable: "billing", Region: "us"},
		&Subscribed{},
		&Topic{Index: 3, Name: "orders.eu"},
		&Record{Index: 3, Offset: 99, Time: 5, OriginRegion: "us", OriginOffset: 12, ProducerID: "p", Sequence: 1, Headers: hs, Payload: bytes.Repeat([]byte{0xff}, 300)},
		&Ack{Index: 3, Offset: 99},
		&Gap{Index: 3, From: 10, To: 20},
		&CaughtUp{Topics: 3},
		&CaughtUp{},
		&PublishOpen{Flags: PublishAnyOrder},
		&PublishOpen{},
		&Topics{Pattern: ">"},
		&TopicInfo{Name: "a.b", First: 1, Next: 10, Bytes: 4096},
		&Watch{Patterns: []string{"orders.>", "a.*.c"}},
		&Watch{},
		&Watch{Patterns: []string{">"}, Incarnation: 0xfeedface},
		&Mirror{Topic: "orders.eu", From: 17},
		&Head{Next: 99, Position: 90, Lag: 1_500_000_000},
		&Head{Next: 99, Position: 90, Lag: 1_500_000_000, Time: 1_700_000_000_000_000_000},
		&Head{Next: 7, Position: 7, Topic: "orders.eu"},
		&Head{Next: 7, Position: 7, Time: 42, Topic: "orders.eu"},
		&Raft{Class: RaftBulk, From: 1 << 60, To: 7}, &RaftBatch{Batch: []byte{1, 2, 3}},
		&GroupStore{Topic: "orders.eu", Entry: []byte{1, 0xde, 0xad, 0xbe, 0xef, 4}}, &GroupStore{Topic: "t"},
		&Raft{Class: RaftFetch, From: 3, To: 1 << 62}, &RaftFetchReq{Group: 1 << 63, Log: "orders.eu", From: 5, To: 1 << 40, MaxBytes: 256 << 10},
		&RaftChunk{Next: 1 << 33, Chunk: []byte{1, 2, 0, 4}},
	}
}

func TestRoundTripEveryType(t *testing.T) {
	var stream []byte
	for _, f := range sampleFrames() {
		b := Append(nil, f)
		got, n, err := Decode(b, Limits{})
		if err != nil {
			t.Fatalf("%s: decode: %v", f.Type(), err)
		}
		if n != len(b) {
			t.Fatalf("%s: used %d of %d bytes", f.Type(), n, len(b))
		}
		if !reflect.DeepEqual(normalize(got), normalize(f)) {
			t.Fatalf("%s: round trip\n got %#v\nwant %#v", f.Type(), got, f)
		}
		stream = append(stream, b...)
	}
	r := NewReader(bytes.NewReader(stream), Limits{})
	for i, want := range sampleFrames() {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("frame %d: got %#v want %#v", i, got, want)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

func TestReaderSplitAtEveryByte(t *testing.T) {
	var stream []byte
	for _, f := range sampleFrames() {
		stream = Append(stream, f)
	}
	r := NewReader(iotest.OneByteReader(bytes.NewReader(stream)), Limits{})
	for i, want := range sampleFrames() {
		got, err := r.Read()
		if err != nil || !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("frame %d: %v %#v", i, err, got)
		}
	}
}

func TestTruncatedStream(t *testing.T) {
	b := Append(nil, &Publish{Seq: 1, Topic: "a", Payload: []byte("xyz")})
	for cut := 1; cut < len(b); cut++ {
		_, err := NewReader(bytes.NewReader(b[:cut]), Limits{}).Read()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d: %v, want ErrUnexpectedEOF", cut, err)
		}
		if _, _, err := Decode(b[:cut], Limits{}); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Decode cut at %d: %v", cut, err)
		}
	}
}

// A huge declared length is refused from the 5-byte header alone, before the body is
// allocated: what the refusal allocates is measured in bytes (the reader's buffer and the
// error), far below the 4 GiB declared. Counting allocations instead would be fragile: the
// counter is process-wide.
func TestFrameTooLargeRefusedBeforeAllocation(t *testing.T) {
	hdr := []byte{byte(TypePublish), 0xff, 0xff, 0xff, 0xff} // 4 GiB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := NewReader(bytes.NewReader(hdr), Limits{MaxFrame: 1024}).Read()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("refusing the frame allocated %d bytes", grew)
	}
	if !strings.Contains(err.Error(), "PUBLISH frame declares 4294967295 bytes, limit 1024") {
		t.Fatalf("message does not name the problem: %v", err)
	}
}

func TestLimitsAndMalformed(t *testing.T) {
	lim := Limits{MaxPayload: 10, MaxHeaders: 2, MaxHeaderBytes: 8, MaxString: 5}
	cases := []struct {
		name string
		f    Frame
		want string
	}{
		{"payload", &Record{Payload: make([]byte, 11)}, "payload: 11 bytes over the limit of 10"},
		{"string", &Topics{Pattern: "abcdef"}, "pattern: 6 bytes over the limit of 5"},
		{"header count", &Record{Headers: []Header{{"a", nil}, {"b", nil}, {"c", nil}}}, "3 headers over the limit of 2"},
		{"header bytes", &Record{Headers: []Header{{"abcd", []byte("ef")}, {"gh", []byte("ij")}}}, "headers: 10 bytes over the limit of 8"},
	}
	for _, c := range cases {
		_, _, err := Decode(Append(nil, c.f), lim)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}

	bad := map[string][]byte{
		"unknown type":       {0x7f, 0, 0, 0, 0},
		"trailing":           frameBytes(TypeAck, []byte{1, 2, 3}),
		"varint overflow":    frameBytes(TypeAck, bytes.Repeat([]byte{0xff}, 11)),
		"string past body":   frameBytes(TypeTopics, []byte{4, 'a'}),
		"caught_up extra":    frameBytes(TypeCaughtUp, []byte{1, 0}),
		"publish_open extra": frameBytes(TypePublishOpen, []byte{1, 0}),
		"header count big":   frameBytes(TypePublish, []byte{0, 1, 'a', 0, 0, 60}),
	}
	for name, b := range bad {
		if _, _, err := Decode(b, Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func frameBytes(t Type, body []byte) []byte {
	b := []byte{byte(t), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	return append(b, body...)
}

func TestErrorText(t *testing.T) {
	e := Errorf(CodeTooLarge, "payload %d bytes", 5)
	if e.Error() != "quicmq: too large: payload 5 bytes" {
		t.Fatal(e.Error())
	}
	if Code(99).String() != "code 99" {
		t.Fatal(Code(99).String())
	}
}

func TestWriterFlushes(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	for _, f := range sampleFrames() {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if out.Len() != 0 {
		t.Fatal("small frames written before Flush")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(&out, Limits{})
	for range sampleFrames() {
		if _, err := r.Read(); err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkEncodeRecord(b *testing.B) {
	rec := &Record{Index: 1, Offset: 1 << 30, Time: 1_700_000_000_000_000_000, Payload: make([]byte, 1024)}
	buf := make([]byte, 0, 4096)
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], rec)
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	raw := Append(nil, &Record{Index: 1, Offset: 1 << 30, Time: 1_700_000_000_000_000_000, Payload: make([]byte, 1024)})
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(raw, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFrameBuffered(t *testing.T) {
	whole := Append(nil, &Ack{Index: 1, Offset: 2})
	two := append(append([]byte{}, whole...), whole[:len(whole)-1]...) // one frame and most of another
	r := NewReader(bytes.NewReader(two), Limits{})
	if r.FrameBuffered() {
		t.Fatal("nothing read yet, but FrameBuffered")
	}
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if r.Buffered() == 0 || r.FrameBuffered() {
		t.Fatalf("a partial frame (%d bytes) counts as a whole one", r.Buffered())
	}
}

// An unknown start kind decodes (the node answers it with CodeInvalidArgument, naming it):
// it is a value the node refuses, not a malformed frame.
func TestSubscribeUnknownStartDecodes(t *testing.T) {
	f, _, err := Decode(frameBytes(TypeSubscribe, []byte{1, 'a', 9, 0, 0, 0}), Limits{})
	if err != nil || f.(*Subscribe).Start != 9 {
		t.Fatalf("got %#v, %v; want a SUBSCRIBE with start 9", f, err)
	}
}
