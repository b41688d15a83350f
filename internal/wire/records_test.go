package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// A Writer puts runs of records into RECORDS frames, starts a new frame whenever a record
// cannot continue the run, and falls back to RECORD for a record too large; a Reader and a
// Decoder give back exactly the records that went in.
func TestRecordsWriterRuns(t *testing.T) {
	hs := []Header{{Key: "k", Value: []byte("v")}}
	big := bytes.Repeat([]byte{7}, maxRecordsBody)
	in := []Record{
		{Index: 0, Offset: 0, Time: 10, OriginRegion: "eu", OriginOffset: 0, Payload: []byte("a")},
		{Index: 0, Offset: 1, Time: 10, OriginRegion: "eu", OriginOffset: 1, Payload: []byte("b"), ProducerID: "p", Sequence: 9, Headers: hs},
		{Index: 0, Offset: 2, Time: 99, OriginRegion: "eu", OriginOffset: 2},
		{Index: 1, Offset: 2, Time: 99, OriginRegion: "eu", OriginOffset: 2},                       // another topic
		{Index: 1, Offset: 4, Time: 99, OriginRegion: "eu", OriginOffset: 4},                       // not the next offset
		{Index: 1, Offset: 5, Time: 98, OriginRegion: "eu", OriginOffset: 5},                       // time went back
		{Index: 1, Offset: 6, Time: 98, OriginRegion: "us", OriginOffset: 1 << 40},                 // another region
		{Index: 1, Offset: 7, Time: 98, OriginRegion: "us", OriginOffset: 1<<40 + 9},               // origin gap
		{Index: 1, Offset: 8, Time: 98, OriginRegion: "us", OriginOffset: 3},                       // origin went back
		{Index: 1, Offset: 9, Time: 98, OriginRegion: "us", OriginOffset: 4, Payload: big},         // too large: RECORD
		{Index: 1, Offset: 10, Time: math.MinInt64, OriginRegion: "us", OriginOffset: 5},           // time went back
		{Index: 1, Offset: 11, Time: math.MaxInt64, OriginRegion: "us", OriginOffset: 6},           // delta past int64
		{Index: 1, Offset: math.MaxUint64, Time: math.MaxInt64, OriginRegion: "", OriginOffset: 0}, // last offset
		{Index: 1, Offset: 0, Time: math.MaxInt64, OriginRegion: "", OriginOffset: 1},              // offsets wrapped
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range in {
		w.BufferRecord(&in[i])
	}
	w.Buffer(&Gap{Index: 1, From: 1, To: 2}) // closes the open frame
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	stream := buf.Bytes()

	var got []Record
	frames := 0
	r := NewReader(bytes.NewReader(stream), Limits{})
	for {
		f, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames++
		switch f := f.(type) {
		case *Records:
			got = append(got, f.Records...)
		case *Record:
			if len(f.Payload) != len(big) {
				t.Fatalf("a small record went in a RECORD frame: %+v", f)
			}
			got = append(got, *f)
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
	if want := 12; frames != want { // 10 RECORDS, 1 RECORD, 1 GAP
		t.Fatalf("%d frames, want %d", frames, want)
	}

	// The Decoder, record by record, from a buffer that holds the whole stream.
	d := NewDecoder(Limits{})
	rest := stream
	for i := range in {
		f, n, err := d.Decode(rest)
		if err != nil {
			t.Fatalf("Decoder, record %d: %v", i, err)
		}
		rec, ok := f.(*Record)
		if !ok || !reflect.DeepEqual(normalize(rec), normalize(&in[i])) {
			t.Fatalf("Decoder, record %d: got %#v", i, f)
		}
		rest = rest[n:]
	}
	if f, n, err := d.Decode(rest); err != nil || f.Type() != TypeGap || n != len(rest) {
		t.Fatalf("after the records: %v %d %v", f, n, err)
	}
}

// Malformed RECORDS frames are refused with ErrMalformed: no record, an overflowing time,
// origin offset or offset, and a Decoder given fewer bytes than the frame has left.
func TestRecordsMalformed(t *testing.T) {
	frame := func(body enc) []byte {
		return Append(nil, rawFrame{TypeRecords, body})
	}
	head := func(off, tm, origin uint64) enc {
		return enc(nil).uvarint(1).uvarint(off).uvarint(tm).str("eu").uvarint(origin)
	}
	entry := func(e enc, dt, gap uint64) enc {
		return e.uvarint(dt).uvarint(gap).str("").uvarint(0).uvarint(0).bytes([]byte("x"))
	}
	cases := map[string][]byte{
		"no records":     frame(head(0, 0, 0)),
		"time overflow":  frame(entry(head(0, uint64(math.MaxInt64), 0), 1, 0)),
		"huge delta":     frame(entry(head(0, 0, 0), math.MaxUint64, 0)),
		"origin wraps":   frame(entry(entry(head(0, 0, math.MaxUint64), 0, 0), 0, 0)),
		"gap overflow":   frame(entry(head(0, 0, 5), 0, math.MaxUint64)),
		"offset wraps":   frame(entry(entry(head(math.MaxUint64, 0, 0), 0, 0), 0, 0)),
		"truncated":      frame(head(0, 0, 0).uvarint(0)),
		"trailing field": Append(nil, rawFrame{TypeSubscribe, enc(nil).str("a").byte1(0).uvarint(0).str("").str("").uvarint(0)}),
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
	good := frame(entry(entry(head(0, 0, 0), 0, 0), 0, 0))
	d := NewDecoder(Limits{})
	_, n, err := d.Decode(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Decode(good[n : len(good)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short bytes mid-frame: %v, want ErrMalformed", err)
	}
}

// SUBSCRIBE's flags are an optional last field: absent when zero, kept when set.
func TestSubscribeFlags(t *testing.T) {
	plain := &Subscribe{Pattern: "a.>", Start: StartOffset, StartValue: 3}
	if b := Append(nil, plain); !bytes.Equal(b, Append(nil, &Subscribe{Pattern: "a.>", Start: StartOffset, StartValue: 3, Flags: 0})) {
		t.Fatal("zero flags changed the encoding")
	}
	withFlags := &Subscribe{Pattern: "a.>", Flags: SubscribeRecords | 1<<9}
	f, _, err := Decode(Append(nil, withFlags), Limits{})
	if err != nil || !reflect.DeepEqual(f, withFlags) {
		t.Fatalf("got %#v, %v", f, err)
	}
}

// rawFrame encodes a body as given, for malformed frames.
type rawFrame struct {
	t    Type
	body enc
}

func (f rawFrame) Type() Type           { return f.t }
func (f rawFrame) appendBody(e enc) enc { return append(e, f.body...) }
func (f rawFrame) decodeBody(d *dec)    {}

// BenchmarkRecordRuns: encoding and decoding (Writer, then Decoder) of 1,000 records of 100 B
// of one topic as RECORD frames and as RECORDS frames; reports stream bytes per record.
func BenchmarkRecordRuns(b *testing.B) {
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Index: 1, Offset: 1<<20 + uint64(i), Time: 1_700_000_000_000_000_000 + int64(i/100)*1_000_000,
			OriginRegion: "eu-west", OriginOffset: 1<<20 + uint64(i), Payload: make([]byte, 100)}
	}
	for _, runs := range []bool{false, true} {
		name := "RECORD"
		if runs {
			name = "RECORDS"
		}
		b.Run(name, func(b *testing.B) {
			var sink bytes.Buffer
			w := NewWriter(&sink)
			d := NewDecoder(Limits{})
			b.ReportAllocs()
			for b.Loop() {
				sink.Reset()
				for i := range recs {
					if runs {
						w.BufferRecord(&recs[i])
					} else {
						w.Buffer(&recs[i])
					}
				}
				w.Flush()
				for rest := sink.Bytes(); len(rest) > 0; {
					_, n, err := d.Decode(rest)
					if err != nil {
						b.Fatal(err)
					}
					rest = rest[n:]
				}
			}
			b.ReportMetric(float64(sink.Len())/float64(len(recs)), "B/record")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
		})
	}
}

// The Writer's shortcut for records without producer, sequence or headers writes exactly the
// bytes the general encoding writes, whatever the payload size, time delta and origin gap.
func TestRecordsSimpleEntryEncoding(t *testing.T) {
	var in []Record
	off, origin, tm := uint64(1000), uint64(5000), int64(1<<40)
	for i, size := range []int{0, 1, 100, 127, 128, 129, 1024, 16 << 10} {
		for _, step := range []struct {
			dt  int64
			gap uint64
		}{{0, 0}, {1, 0}, {127, 1}, {128, 127}, {1 << 20, 128}, {0, 1 << 33}} {
			tm += step.dt
			origin += step.gap + 1
			in = append(in, Record{Index: 3, Offset: off, Time: tm, OriginRegion: "eu", OriginOffset: origin,
				Payload: bytes.Repeat([]byte{byte(i)}, size)})
			off++
		}
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range in {
		w.BufferRecord(&in[i])
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// The same runs, encoded field by field (Append uses appendEntry for every entry).
	var want []byte
	for rest := buf.Bytes(); len(rest) > 0; {
		f, n, err := Decode(rest, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		want = Append(want, f)
		rest = rest[n:]
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("the shortcut's %d bytes differ from the general encoding's %d", buf.Len(), len(want))
	}
}

// The Decoder's shortcut for simple entries gives the same record, bytes used and error as
// the general field-by-field path, for well-formed and malformed entries alike.
func TestRecordsSimpleEntryDecoding(t *testing.T) {
	lim := Limits{MaxPayload: 200}.WithDefaults()
	cases := [][]byte{
		{0, 0, 0, 0, 0, 0},
		{5, 7, 0, 0, 0, 3, 'a', 'b', 'c', 9},
		{5, 7, 0, 0, 0, 4, 'a', 'b', 'c'},  // payload past the end
		{5, 7, 0, 0, 0, 0x80},              // truncated length
		{5, 7, 0, 0, 0, 0x81, 0x80, 0x80},  // truncated length
		{5, 7, 0, 0, 0, 0x80, 0x00},        // non-canonical zero
		{5, 7, 0, 0, 0, 0xc9, 0x01},        // 201: over MaxPayload
		{0x80, 1, 0, 0, 0, 0, 0, 0},        // two-byte delta: general path
		{1, 2, 1, 'p', 0, 0, 0},            // producer: general path
		{1, 2, 0, 9, 0, 0},                 // sequence: general path
		{1, 2, 0, 0, 1, 1, 'k', 1, 'v', 0}, // headers: general path
		{1, 2, 0, 0, 0},                    // too short
	}
	long := append([]byte{3, 4, 0, 0, 0, 0xc8, 0x01}, bytes.Repeat([]byte{1}, 200)...)
	cases = append(cases, long, long[:len(long)-1])
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, 6+rnd.IntN(10))
		for i := range b {
			if rnd.IntN(3) == 0 {
				b[i] = byte(rnd.IntN(256))
			}
		}
		cases = append(cases, b)
	}
	for _, c := range cases {
		d1 := dec{b: c, lim: &lim, typ: TypeRecords}
		d2 := dec{b: c, lim: &lim, typ: TypeRecords}
		var r1, r2 Record
		var dt1, gap1 uint64
		if !simpleEntry(&d1, &r1, &dt1, &gap1) {
			continue
		}
		dt2, gap2 := entryFields(&d2, &r2)
		if d2.err != nil || dt1 != dt2 || gap1 != gap2 || len(d1.b) != len(d2.b) || !reflect.DeepEqual(normalize(&r1), normalize(&r2)) {
			t.Fatalf("% x: shortcut gave %+v (%d, %d, %d left), general %+v (%d, %d, %d left, %v)",
				c, r1, dt1, gap1, len(d1.b), r2, dt2, gap2, len(d2.b), d2.err)
		}
	}
}
