package wire

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

// A publish over a per-publish limit decodes as refused, with the limit's code and a message
// naming the limit and the value, and the frames after it decode as if it were not there.
func TestPublishOverLimitIsRefusedNotMalformed(t *testing.T) {
	lim := Limits{MaxPayload: 10, MaxHeaders: 2, MaxHeaderBytes: 8, MaxString: 5, MaxTopic: 7}
	good := func(seq uint64) *Publish {
		return &Publish{Seq: seq, Topic: "a.b", ProducerID: "p", Sequence: seq, Headers: []Header{{"k", []byte("v")}}, Payload: []byte("x")}
	}
	cases := []struct {
		name string
		bad  *Publish
		code Code
		want string
	}{
		{"payload", &Publish{Topic: "a", Payload: make([]byte, 11)}, CodeTooLarge, "payload of 11 bytes is over the limit of 10 bytes"},
		{"topic", &Publish{Topic: "abcdefgh"}, CodeInvalidTopic, "topic of 8 bytes is over the limit of 7 bytes"},
		{"producer id", &Publish{Topic: "a", ProducerID: "abcdef"}, CodeTooLarge, "producer id of 6 bytes is over the limit of 5 bytes"},
		{"header count", &Publish{Topic: "a", Headers: []Header{{"a", nil}, {"b", nil}, {"c", nil}}}, CodeTooLarge, "3 headers are over the limit of 2"},
		{"header key", &Publish{Topic: "a", Headers: []Header{{"abcdef", nil}}}, CodeTooLarge, "header key of 6 bytes is over the limit of 5 bytes"},
		{"header bytes", &Publish{Topic: "a", Headers: []Header{{"abcd", []byte("ef")}, {"gh", []byte("ij")}}}, CodeTooLarge, "headers of 10 bytes (keys and values) are over the limit of 8 bytes"},
	}
	for _, c := range cases {
		c.bad.Seq = 2
		var b []byte
		b = Append(b, good(1))
		b = Append(b, c.bad)
		b = Append(b, good(3))
		r := NewReader(bytes.NewReader(b), lim)
		for seq := uint64(1); seq <= 3; seq++ {
			f, err := r.Read()
			if err != nil {
				t.Fatalf("%s: frame %d: %v", c.name, seq, err)
			}
			p := f.(*Publish)
			if seq != 2 {
				if p.Refused != nil || !equalFrames(p, good(seq)) {
					t.Fatalf("%s: good publish %d decoded as %#v", c.name, seq, p)
				}
				continue
			}
			if p.Refused == nil || p.Refused.Code != c.code || p.Refused.Message != c.want {
				t.Errorf("%s: refused as %v, want code %d %q", c.name, p.Refused, c.code, c.want)
			}
			if p.Seq != 2 || p.Payload != nil || p.Headers != nil || p.ProducerID != "" {
				t.Errorf("%s: refused publish keeps more than its seq and topic: %#v", c.name, p)
			}
		}
		if _, err := r.Read(); err != io.EOF {
			t.Fatalf("%s: after the frames: %v", c.name, err)
		}
	}
}

func equalFrames(a, b Frame) bool { return bytes.Equal(Append(nil, a), Append(nil, b)) }

// In a PUBLISH_BATCH one entry over a limit is refused alone; a topic over its limit refuses
// every entry. The frame decodes either way.
func TestPublishBatchEntryOverLimit(t *testing.T) {
	lim := Limits{MaxPayload: 10, MaxTopic: 7}
	f := &PublishBatch{Seq: 5, Topic: "a.b", Publishes: []Publish{
		{Payload: []byte("ok")}, {Payload: make([]byte, 11)}, {Payload: []byte("ok too")},
	}}
	got, _, err := Decode(Append(nil, f), lim)
	if err != nil {
		t.Fatal(err)
	}
	ps := got.(*PublishBatch).Publishes
	if len(ps) != 3 || ps[0].Refused != nil || ps[2].Refused != nil || string(ps[2].Payload) != "ok too" || ps[2].Seq != 7 {
		t.Fatalf("entries around the bad one: %#v", ps)
	}
	if ps[1].Refused == nil || ps[1].Refused.Code != CodeTooLarge || ps[1].Seq != 6 {
		t.Fatalf("entry 1: %#v", ps[1])
	}

	f.Topic = "abcdefgh"
	got, _, err = Decode(Append(nil, f), lim)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range got.(*PublishBatch).Publishes {
		if p.Refused == nil || p.Refused.Code != CodeInvalidTopic || !strings.Contains(p.Refused.Message, "8 bytes") {
			t.Errorf("entry %d of a batch with a long topic: %#v", i, p)
		}
	}
}

// Framing faults inside a publish still make the frame malformed.
func TestPublishFramingStillMalformed(t *testing.T) {
	bad := map[string][]byte{
		"payload past body":  frameBytes(TypePublish, []byte{0, 1, 'a', 0, 0, 0, 9, 'x'}),
		"topic past body":    frameBytes(TypePublish, []byte{0, 9, 'a'}),
		"header past body":   frameBytes(TypePublish, []byte{0, 1, 'a', 0, 0, 1, 5, 'k', 0, 0}),
		"header count":       frameBytes(TypePublish, []byte{0, 1, 'a', 0, 0, 60}),
		"trailing":           append(Append(nil, &Publish{Topic: "a"})[:0:0], frameBytes(TypePublish, []byte{0, 1, 'a', 0, 0, 0, 0, 7})...),
		"batch with nothing": frameBytes(TypePublishBatch, []byte{0, 1, 'a'}),
	}
	for name, b := range bad {
		if _, _, err := Decode(b, Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

// Refusing a publish for its header count allocates no header slice: a frame full of
// two-byte headers costs its body and the frame, not twenty times its body.
func TestPublishManyHeadersAllocatesNothingPerHeader(t *testing.T) {
	const n = 50_000
	body := []byte{0, 1, 'a', 0, 0}
	body = appendUvarint(body, n)
	body = append(body, make([]byte, 2*n)...) // n empty keys and values
	body = append(body, 0)                    // empty payload
	b := frameBytes(TypePublish, body)
	lim := Limits{MaxFrame: len(body)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, _, err := Decode(b, lim)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if p := f.(*Publish); p.Refused == nil || !strings.Contains(p.Refused.Message, "50000 headers are over the limit of 64") {
		t.Fatalf("refused as %v", p.Refused)
	}
	// The body copy is one len(b); a []Header of n would be 40 bytes a header.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(2*len(b)) {
		t.Fatalf("decoding a %d-byte frame allocated %d bytes", len(b), grew)
	}
}

func appendUvarint(b []byte, v uint64) []byte { return enc(b).uvarint(v) }

// BenchmarkDecodePublishBatch: a client's PUBLISH_BATCH of 64 records of 100 bytes, decoded
// as a node's publish reader does (per frame; per-publish limits checked).
func BenchmarkDecodePublishBatch(b *testing.B) {
	f := &PublishBatch{Seq: 1, Topic: "orders.eu.created"}
	for range 64 {
		f.Publishes = append(f.Publishes, Publish{ProducerID: "p", Sequence: 1, Headers: []Header{{"k", []byte("v")}}, Payload: make([]byte, 100)})
	}
	raw := Append(nil, f)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(bytes.NewReader(raw), Limits{})
		if _, err := r.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
