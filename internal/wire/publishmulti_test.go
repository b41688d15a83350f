package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

// A Writer puts publishes with consecutive seqs into PUBLISH_MULTI frames whatever their
// topics, one run per change of topic (a run of 128 or more entries takes a two-byte count),
// and starts a new frame on a seq gap, a full frame (bytes or entries) or a seq that wraps;
// a publish too large for a frame goes as PUBLISH. A Reader gives back exactly the publishes
// that went in, in order.
func TestPublishMultiWriter(t *testing.T) {
	const maxBody = 8 << 10
	hs := []Header{{Key: "k", Value: []byte("v")}}
	var in []Publish
	add := func(seq uint64, topic string, size int) {
		in = append(in, Publish{Seq: seq, Topic: topic, Payload: bytes.Repeat([]byte{byte(seq)}, size)})
	}
	add(1, "a", 10)
	add(2, "b", 10)
	in = append(in, Publish{Seq: 3, Topic: "b", ProducerID: "p", Sequence: 7, Headers: hs, Payload: []byte("h")})
	add(4, "a", 0)
	add(6, "c", 1)    // seq gap: a new frame
	add(7, "c", 9000) // too large for a frame: PUBLISH
	add(8, "d", 5000) // fits an empty frame
	add(9, "e", 5000) // does not fit beside it
	for seq := uint64(10); seq < 10+300; seq++ {
		add(seq, "f", 0) // one run past 128 entries
	}
	for seq := uint64(310); seq < 310+MaxBatchPublishes; seq++ {
		add(seq, "g."+string(rune('a'+seq%3)), 0) // a frame's entries run out
	}
	add(math.MaxUint64, "h", 1)
	add(0, "h", 1) // seq wrapped
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range in {
		w.BufferPublishMulti(&in[i], maxBody)
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
		case *PublishMulti:
			if f.Publishes[0].Seq != f.Seq {
				t.Fatalf("frame seq %d, first publish %d", f.Seq, f.Publishes[0].Seq)
			}
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
	// 1-4; 6; PUBLISH 7; 8; 9, f and g up to the frame's entry bound; the rest of g; h at
	// 2^64-1; h at 0.
	m := TypePublishMulti
	want := []Type{m, m, TypePublish, m, m, m, m, m}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("frames %v, want %v", types, want)
	}
}

func TestPublishMultiMalformed(t *testing.T) {
	frame := func(body enc) []byte { return Append(nil, rawFrame{TypePublishMulti, body}) }
	entry := func(e enc) enc { return e.str("").uvarint(0).uvarint(0).bytes([]byte("x")) }
	many := enc(nil).uvarint(0).str("a").uvarint(MaxBatchPublishes/2 + 1)
	for range MaxBatchPublishes/2 + 1 {
		many = entry(many)
	}
	many = many.str("b").uvarint(MaxBatchPublishes / 2)
	for range MaxBatchPublishes / 2 {
		many = entry(many)
	}
	cases := map[string][]byte{
		"no runs":       frame(enc(nil).uvarint(1)),
		"count 0":       frame(enc(nil).uvarint(1).str("a").uvarint(0)),
		"count short":   frame(entry(enc(nil).uvarint(1).str("a").uvarint(2))),
		"count missing": frame(enc(nil).uvarint(1).str("a")),
		"seq wraps":     frame(entry(entry(enc(nil).uvarint(math.MaxUint64).str("a").uvarint(2)))),
		"too many":      frame(many),
		"count huge":    frame(entry(enc(nil).uvarint(1).str("a").uvarint(math.MaxUint64))),
		"truncated":     frame(enc(nil).uvarint(1).str("a").uvarint(1).str("")),
	}
	for name, b := range cases {
		if _, _, err := Decode(b, Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// The largest frame that fits is fine, across runs.
	ok := enc(nil).uvarint(math.MaxUint64 - MaxBatchPublishes + 1)
	for run := range 4 {
		ok = ok.str(string(rune('a' + run))).uvarint(MaxBatchPublishes / 4)
		for range MaxBatchPublishes / 4 {
			ok = entry(ok)
		}
	}
	f, _, err := Decode(frame(ok), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if ps := f.(*PublishMulti).Publishes; len(ps) != MaxBatchPublishes || ps[len(ps)-1].Seq != math.MaxUint64 || ps[len(ps)-1].Topic != "d" {
		t.Fatalf("decoded %d publishes, last %+v", len(ps), ps[len(ps)-1])
	}
}

// A run whose topic is over MaxTopic refuses that run's publishes (code 4) and no other; a
// publish over a per-publish limit is refused alone.
func TestPublishMultiRefusesARun(t *testing.T) {
	lim := Limits{MaxTopic: 8}
	long := strings.Repeat("t", 9)
	in := &PublishMulti{Seq: 5, Publishes: []Publish{
		{Topic: "a", Payload: []byte("1")},
		{Topic: long, Payload: []byte("2")},
		{Topic: long, Payload: []byte("3")},
		{Topic: "b", ProducerID: strings.Repeat("p", 5000), Payload: []byte("4")},
		{Topic: "b", Payload: []byte("5")},
	}}
	f, _, err := Decode(Append(nil, in), lim)
	if err != nil {
		t.Fatal(err)
	}
	ps := f.(*PublishMulti).Publishes
	codes := make([]Code, len(ps))
	for i, p := range ps {
		if p.Seq != 5+uint64(i) {
			t.Fatalf("publish %d has seq %d", i, p.Seq)
		}
		if p.Refused != nil {
			codes[i] = p.Refused.Code
		}
	}
	if want := []Code{0, CodeInvalidTopic, CodeInvalidTopic, CodeTooLarge, 0}; !reflect.DeepEqual(codes, want) {
		t.Fatalf("refusals %v, want %v", codes, want)
	}
	if ps[0].Topic != "a" || ps[4].Topic != "b" || string(ps[4].Payload) != "5" {
		t.Fatalf("kept publishes: %+v %+v", ps[0], ps[4])
	}
}
