package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
)

// A Writer puts records of many topics into RUNS frames, binding a topic in the entry of its
// first record, continuing a run where it can, starting a frame when the origin region
// changes or a time delta would overflow, and falling back to TOPIC and RECORD for a record
// too large; a Reader and a Decoder give back exactly the records that went in.
func TestRunsWriter(t *testing.T) {
	hs := []Header{{Key: "k", Value: []byte("v")}}
	big := bytes.Repeat([]byte{7}, maxRecordsBody)
	in := []Record{
		{Index: 0, Bind: "w.a", Offset: 0, Time: 10, OriginRegion: "eu", OriginOffset: 0, Payload: []byte("a")},
		{Index: 0, Offset: 1, Time: 10, OriginRegion: "eu", OriginOffset: 1, Payload: []byte("b"), ProducerID: "p", Sequence: 9, Headers: hs},
		{Index: 1, Bind: "w.b", Offset: 0, Time: 5, OriginRegion: "eu", OriginOffset: 0},              // another topic, time back
		{Index: 0, Offset: 2, Time: 99, OriginRegion: "eu", OriginOffset: 2},                          // back to the first
		{Index: 0, Offset: 3, Time: 98, OriginRegion: "eu", OriginOffset: 7},                          // time back, origin gap
		{Index: 0, Offset: 4, Time: 98, OriginRegion: "eu", OriginOffset: 3},                          // origin went back
		{Index: 2, Bind: "w.c", Offset: 1 << 50, Time: 98, OriginRegion: "eu", OriginOffset: 2},       // origin far below offset
		{Index: 2, Offset: 1<<50 + 1, Time: 98, OriginRegion: "us", OriginOffset: math.MaxUint64 - 1}, // another region
		{Index: 2, Offset: 1<<50 + 2, Time: 98, OriginRegion: "us", OriginOffset: math.MaxUint64},
		{Index: 3, Bind: "w.d", Offset: 0, Time: 98, OriginRegion: "us", OriginOffset: 0, Payload: big}, // too large
		{Index: 3, Offset: 1, Time: math.MinInt64, OriginRegion: "us", OriginOffset: 1},
		{Index: 3, Offset: 2, Time: math.MaxInt64, OriginRegion: "us", OriginOffset: 2}, // delta past int64
		{Index: 3, Offset: math.MaxUint64, Time: math.MaxInt64, OriginRegion: "us", OriginOffset: 3},
		{Index: 3, Offset: 0, Time: math.MaxInt64, OriginRegion: "us", OriginOffset: 4}, // offsets wrapped
		{Index: maxRunIndex, Bind: "w.e", Offset: 0, Time: 0, OriginRegion: "us"},       // the largest index
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range in {
		w.BufferRun(&in[i])
	}
	w.Buffer(&Gap{Index: 1, From: 1, To: 2}) // closes the open frame
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	stream := buf.Bytes()

	var got []Record
	var types []Type
	r := NewReader(bytes.NewReader(stream), Limits{})
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
		case *Runs:
			got = append(got, f.Records...)
		case *Topic:
			if f.Index != 3 || f.Name != "w.d" {
				t.Fatalf("TOPIC %+v, want the large record's binding", f)
			}
		case *Record:
			if len(f.Payload) != len(big) {
				t.Fatalf("a small record went in a RECORD frame: %+v", f)
			}
			c := *f
			c.Bind = "w.d" // the TOPIC frame before it
			got = append(got, c)
		case *Gap:
		default:
			t.Fatalf("unexpected %s", f.Type())
		}
	}
	if len(got) != len(in) {
		t.Fatalf("got %d records, want %d", len(got), len(in))
	}
	for i := range in {
		if !reflect.DeepEqual(normalize(&got[i]), normalize(&in[i])) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i], in[i])
		}
	}
	// eu: one frame of 7 records; us: one of 2; TOPIC and RECORD; one frame of 1, another
	// after the delta past int64, of 4; GAP.
	want := []Type{TypeRuns, TypeRuns, TypeTopic, TypeRecord, TypeRuns, TypeRuns, TypeGap}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("frames %v, want %v", types, want)
	}

	// The Decoder, record by record, from a buffer that holds the whole stream.
	d := NewDecoder(Limits{})
	rest := stream
	for i := 0; i < len(in); {
		f, n, err := d.Decode(rest)
		if err != nil {
			t.Fatalf("Decoder, record %d: %v", i, err)
		}
		rest = rest[n:]
		if f.Type() == TypeTopic {
			continue
		}
		rec, ok := f.(*Record)
		if !ok {
			t.Fatalf("Decoder, record %d: got %#v", i, f)
		}
		c := *rec
		if len(c.Payload) == len(big) {
			c.Bind = "w.d"
		}
		if !reflect.DeepEqual(normalize(&c), normalize(&in[i])) {
			t.Fatalf("Decoder, record %d:\n got %+v\nwant %+v", i, c, in[i])
		}
		i++
	}
	if f, n, err := d.Decode(rest); err != nil || f.Type() != TypeGap || n != len(rest) {
		t.Fatalf("after the records: %v %d %v", f, n, err)
	}
}

// A wildcard's one-record topics take one entry each, with no frame per topic: 1,000 of
// them (100-byte payloads) fit in a few RUNS frames, smaller than TOPIC and RECORD frames.
func TestRunsManyTopics(t *testing.T) {
	payload := bytes.Repeat([]byte{1}, 100)
	var runs, old bytes.Buffer
	w, wo := NewWriter(&runs), NewWriter(&old)
	for i := range 1000 {
		r := Record{Index: uint64(i), Bind: "scale.n" + string(rune('a'+i%26)), Time: 1_700_000_000_000_000_000 + int64(i)*1000, OriginRegion: "eu", Payload: payload}
		w.BufferRun(&r)
		wo.Buffer(&Topic{Index: r.Index, Name: r.Bind})
		wo.Buffer(&r)
	}
	w.Flush()
	wo.Flush()
	frames := 0
	rd := NewReader(&runs, Limits{})
	for {
		_, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames++
	}
	if frames > 5 || runs.Len() >= old.Len()*9/10 {
		t.Fatalf("%d RUNS frames of %d bytes; TOPIC and RECORD frames took %d bytes", frames, runs.Len(), old.Len())
	}
	t.Logf("1,000 one-record topics: %d RUNS frames, %d bytes; TOPIC+RECORD: 2,000 frames, %d bytes", frames, runs.Len(), old.Len())
}

// Malformed RUNS frames are refused with ErrMalformed, by Decode and by the Decoder.
func TestRunsMalformed(t *testing.T) {
	frame := func(body enc) []byte { return Append(nil, rawFrame{TypeRuns, body}) }
	head := func(tm uint64) enc { return enc(nil).uvarint(tm).str("eu") }
	tail := func(e enc) enc { return e.str("").uvarint(0).uvarint(0).bytes([]byte("x")) }
	run := func(e enc, index, off, dt, skew uint64) enc {
		return tail(e.uvarint(index<<1 + 1).uvarint(off).uvarint(dt).uvarint(skew))
	}
	cont := func(e enc, dt, gap uint64) enc { return tail(e.uvarint(0).uvarint(dt).uvarint(gap)) }
	cases := map[string][]byte{
		"no records":      frame(head(0)),
		"first continues": frame(cont(head(0), 0, 0)),
		"empty name":      frame(tail(head(0).uvarint(2).str("").uvarint(0).uvarint(0).uvarint(0))),
		"name too long":   frame(tail(head(0).uvarint(2).str(string(make([]byte, 5000))).uvarint(0).uvarint(0).uvarint(0))),
		"time overflow":   frame(run(head(uint64(math.MaxInt64)), 0, 0, zigzag(1), 0)),
		"time underflow":  frame(run(head(1<<63), 0, 0, zigzag(-1), 0)),
		"offset wraps":    frame(cont(run(head(0), 0, math.MaxUint64, 0, 0), 0, 0)),
		"origin wraps":    frame(cont(run(head(0), 0, 0, 0, zigzag(-1)), 0, 0)),
		"gap overflow":    frame(cont(run(head(0), 0, 0, 0, 0), 0, math.MaxUint64)),
		"truncated":       frame(head(0).uvarint(1).uvarint(0)),
		"payload too big": frame(head(0).uvarint(1).uvarint(0).uvarint(0).uvarint(0).str("").uvarint(0).uvarint(0).uvarint(2 << 20)),
	}
	for name, b := range cases {
		if _, _, err := Decode(b, Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decode: %v, want ErrMalformed", name, err)
		}
		d := NewDecoder(Limits{})
		var err error
		for rest := b; err == nil && len(rest) > 0; {
			var n int
			_, n, err = d.Decode(rest)
			rest = rest[n:]
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decoder: %v, want ErrMalformed", name, err)
		}
	}
	// The same frames made well: they decode.
	good := frame(cont(run(head(5), 3, 0, zigzag(-5), zigzag(2)), zigzag(7), 1))
	f, _, err := Decode(good, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{Index: 3, Offset: 0, Time: 0, OriginRegion: "eu", OriginOffset: 2, Payload: []byte("x")},
		{Index: 3, Offset: 1, Time: 7, OriginRegion: "eu", OriginOffset: 4, Payload: []byte("x")},
	}
	if !reflect.DeepEqual(f.(*Runs).Records, want) {
		t.Fatalf("got %+v, want %+v", f.(*Runs).Records, want)
	}
}

func TestZigzag(t *testing.T) {
	for _, v := range []int64{0, -1, 1, -2, 63, -64, math.MaxInt64, math.MinInt64} {
		if got := unzigzag(zigzag(v)); got != v {
			t.Errorf("zigzag %d: got back %d", v, got)
		}
	}
	if zigzag(-1) != 1 || zigzag(1) != 2 || zigzag(-64) != 127 {
		t.Errorf("zigzag is not protobuf's: -1 %d, 1 %d, -64 %d", zigzag(-1), zigzag(1), zigzag(-64))
	}
}
