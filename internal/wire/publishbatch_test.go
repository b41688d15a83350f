package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
)

// A Writer puts runs of publishes to one topic with consecutive seqs into PUBLISH_BATCH
// frames, starts a new frame on a topic change, a seq gap, a full frame (bytes or entries)
// or a seq that wraps, and sends a publish too large for a batch as PUBLISH; a Reader gives
// back exactly the publishes that went in, in order.
func TestPublishBatchWriter(t *testing.T) {
	const maxBody = 8 << 10
	hs := []Header{{Key: "k", Value: []byte("v")}}
	var in []Publish
	add := func(seq uint64, topic string, size int) {
		in = append(in, Publish{Seq: seq, Topic: topic, Payload: bytes.Repeat([]byte{byte(seq)}, size)})
	}
	add(1, "a", 10)
	add(2, "a", 10)
	in = append(in, Publish{Seq: 3, Topic: "a", ProducerID: "p", Sequence: 7, Headers: hs, Payload: []byte("h")})
	add(4, "b", 0)    // topic change
	add(6, "b", 1)    // seq gap
	add(7, "b", 9000) // too large for a batch: PUBLISH
	add(8, "b", 5000) // fits an empty batch
	add(9, "b", 5000) // does not fit beside it
	for seq := uint64(10); seq < 10+MaxBatchPublishes+1; seq++ {
		add(seq, "c", 0) // one entry too many for a frame
	}
	add(math.MaxUint64, "d", 1)
	add(0, "d", 1) // seq wrapped
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range in {
		w.BufferPublish(&in[i], maxBody)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []Publish
	var types []Type
	r := NewReader(bytes.NewReader(buf.Bytes()), Limits{})
	for {
		f, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, f.Type())
		switch f := f.(type) {
		case *PublishBatch:
			got = append(got, f.Publishes...)
		case *Publish:
			got = append(got, *f)
		default:
			t.Fatalf("unexpected %s", f.Type())
		}
	}
	if len(got) != len(in) {
		t.Fatalf("got %d publishes, want %d", len(got), len(in))
	}
	for i := range in {
		if !reflect.DeepEqual(normalize(&got[i]), normalize(&in[i])) {
			t.Fatalf("publish %d:\n got %+v\nwant %+v", i, got[i], in[i])
		}
	}
	// a: 1 batch; b: 2 batches, PUBLISH, 2 batches; c: 2 batches; d: 2 batches.
	want := []Type{TypePublishBatch, TypePublishBatch, TypePublishBatch, TypePublish, TypePublishBatch,
		TypePublishBatch, TypePublishBatch, TypePublishBatch, TypePublishBatch, TypePublishBatch}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("frames %v, want %v", types, want)
	}
}

func TestPublishBatchMalformed(t *testing.T) {
	frame := func(t Type, body enc) []byte { return Append(nil, rawFrame{t, body}) }
	entry := func(e enc) enc { return e.str("").uvarint(0).uvarint(0).bytes([]byte("x")) }
	many := enc(nil).uvarint(0).str("a")
	for range MaxBatchPublishes + 1 {
		many = entry(many)
	}
	cases := map[string][]byte{
		"no publishes":   frame(TypePublishBatch, enc(nil).uvarint(1).str("a")),
		"seq wraps":      frame(TypePublishBatch, entry(entry(enc(nil).uvarint(math.MaxUint64).str("a")))),
		"too many":       frame(TypePublishBatch, many),
		"truncated":      frame(TypePublishBatch, enc(nil).uvarint(1).str("a").str("")),
		"acks count 0":   frame(TypePublishAcks, enc(nil).uvarint(1).uvarint(0).uvarint(0).uvarint(0)),
		"acks seq wraps": frame(TypePublishAcks, enc(nil).uvarint(math.MaxUint64).uvarint(2).uvarint(0).uvarint(0)),
		"acks off wraps": frame(TypePublishAcks, enc(nil).uvarint(0).uvarint(2).uvarint(math.MaxUint64).uvarint(0)),
	}
	for name, b := range cases {
		if _, _, err := Decode(b, Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// The largest batch and the longest acked run that fit are fine.
	ok := enc(nil).uvarint(math.MaxUint64 - MaxBatchPublishes + 1).str("a")
	for range MaxBatchPublishes {
		ok = entry(ok)
	}
	if _, _, err := Decode(frame(TypePublishBatch, ok), Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Decode(frame(TypePublishAcks, enc(nil).uvarint(math.MaxUint64-1).uvarint(2).uvarint(5).uvarint(0)), Limits{}); err != nil {
		t.Fatal(err)
	}
}
