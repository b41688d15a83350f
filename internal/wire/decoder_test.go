package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
	"unsafe"
)

// The Decoder decodes every frame type exactly as Decode does, frame after frame of one
// buffer, and reports an incomplete frame the same way.
func TestDecoderMatchesDecode(t *testing.T) {
	var stream []byte
	for _, f := range sampleFrames() {
		stream = Append(stream, f)
	}
	d := NewDecoder(Limits{})
	rest := stream
	for i, want := range sampleFrames() {
		got, n, err := d.Decode(rest)
		if err != nil {
			t.Fatalf("frame %d (%s): %v", i, want.Type(), err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("frame %d: got %#v want %#v", i, got, want)
		}
		if _, dn, _ := Decode(rest, Limits{}); dn != n {
			t.Fatalf("frame %d: Decoder used %d bytes, Decode %d", i, n, dn)
		}
		rest = rest[n:]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left", len(rest))
	}
	rec := Append(nil, &Record{Index: 1, Payload: []byte("abc")})
	for cut := 0; cut < len(rec); cut++ {
		if _, n, err := d.Decode(rec[:cut]); !errors.Is(err, io.ErrUnexpectedEOF) || n != 0 {
			t.Fatalf("cut at %d: %d, %v; want 0, ErrUnexpectedEOF", cut, n, err)
		}
	}
}

// A RECORD comes back as the Decoder's one Record, its payload aliasing the caller's bytes
// (no copy), and repeated origin regions and producers as the same string.
func TestDecoderRecordInPlace(t *testing.T) {
	d := NewDecoder(Limits{})
	var buf []byte
	buf = Append(buf, &Record{Index: 1, Offset: 1, OriginRegion: "eu", ProducerID: "p", Payload: []byte("one")})
	buf = Append(buf, &Record{Index: 1, Offset: 2, OriginRegion: "eu", ProducerID: "p", Payload: []byte("two")})
	buf = Append(buf, &Record{Index: 1, Offset: 3, OriginRegion: "us", Payload: []byte("three")})

	f1, n1, err := d.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	r1 := f1.(*Record)
	region, producer := r1.OriginRegion, r1.ProducerID
	if &r1.Payload[0] != &buf[n1-3] {
		t.Fatal("payload was copied, want it aliasing the input")
	}
	f2, n2, err := d.Decode(buf[n1:])
	if err != nil {
		t.Fatal(err)
	}
	r2 := f2.(*Record)
	if r2 != r1 || r2.Offset != 2 || string(r2.Payload) != "two" {
		t.Fatalf("second record %#v (same value: %v)", r2, r2 == r1)
	}
	if unsafe.StringData(r2.OriginRegion) != unsafe.StringData(region) ||
		unsafe.StringData(r2.ProducerID) != unsafe.StringData(producer) {
		t.Fatal("repeated origin region or producer was allocated again")
	}
	f3, _, err := d.Decode(buf[n1+n2:])
	if err != nil {
		t.Fatal(err)
	}
	if r3 := f3.(*Record); r3.OriginRegion != "us" || r3.ProducerID != "" || string(r3.Payload) != "three" {
		t.Fatalf("third record %#v", r3)
	}
	// A malformed record is refused and leaves nothing of itself behind.
	bad := Append(nil, &Record{Index: 1, Payload: []byte("x")})
	bad = append(bad[:len(bad)-2], 5, 'x') // payload declares 5 bytes, 1 left
	if _, _, err := d.Decode(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad record: %v, want ErrMalformed", err)
	}
	if !reflect.DeepEqual(d.rec, Record{}) {
		t.Fatalf("after a malformed record the Decoder holds %#v", d.rec)
	}
}

// The Reader decodes frames that keep no slice of their body from one reused buffer: what
// was decoded earlier (strings, and payloads of frames that do keep their body) must not
// change when later frames are read.
func TestReaderScratchDoesNotLeak(t *testing.T) {
	frames := append(sampleFrames(), sampleFrames()...)
	frames = append(frames,
		&Publish{Seq: 1, Topic: "a", Payload: []byte("payload-1")},
		&ErrorFrame{Code: CodeInternal, Message: "first message"},
		&PublishAck{Seq: 1, Offset: 2, Time: 3},
		&Publish{Seq: 2, Topic: "a", Payload: []byte("payload-2")},
		&ErrorFrame{Code: CodeInternal, Message: "other message"},
		&TopicInfo{Name: "zzzzzzzzzzzzzzzz", First: 1},
	)
	var stream []byte
	for _, f := range frames {
		stream = Append(stream, f)
	}
	r := NewReader(bytes.NewReader(stream), Limits{})
	var got []Frame
	for range frames {
		f, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	for i := range frames {
		if !reflect.DeepEqual(normalize(got[i]), normalize(frames[i])) {
			t.Fatalf("frame %d changed after later reads: %#v, want %#v", i, got[i], frames[i])
		}
	}
	n := len(got)
	if a, b := got[n-6].(*Publish).Topic, got[n-3].(*Publish).Topic; unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("the repeated topic was allocated again")
	}
}

// FuzzDecoder: for any bytes, the Decoder accepts and refuses what Decode does and yields
// the same frames.
func FuzzDecoder(f *testing.F) {
	addSeeds(f)
	lim := Limits{MaxFrame: 1 << 16, MaxPayload: 1 << 15, MaxHeaders: 8, MaxHeaderBytes: 256, MaxString: 300}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(lim)
		for rest := data; ; {
			want, wn, werr := Decode(rest, lim)
			got, gn, gerr := d.Decode(rest)
			if len(rest) >= headerLen && (Type(rest[0]) == TypeRecords || Type(rest[0]) == TypeRuns) && gerr == nil {
				checkDecoderRecords(t, d, rest, want, wn, werr, got, gn)
				if werr != nil {
					return
				}
				rest = rest[wn:]
				continue
			}
			if (werr == nil) != (gerr == nil) || gn != wn {
				t.Fatalf("Decode: %d, %v; Decoder: %d, %v", wn, werr, gn, gerr)
			}
			if werr != nil {
				if werr.Error() != gerr.Error() {
					t.Fatalf("errors differ: %v / %v", werr, gerr)
				}
				return
			}
			if !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Fatalf("frames differ:\n%#v\n%#v", got, want)
			}
			rest = rest[wn:]
		}
	})
}

// checkDecoderRecords: for a RECORDS or RUNS frame whose first record the Decoder returned (got, gn),
// the Decoder returns the frame's records one per call, the records Decode returned, using the
// frame's bytes exactly; or, where Decode refused the frame, the same error after the records
// before the bad one.
func checkDecoderRecords(t *testing.T, d *Decoder, rest []byte, want Frame, wn int, werr error, got Frame, gn int) {
	t.Helper()
	frameLen := headerLen + int(binary.BigEndian.Uint32(rest[1:headerLen]))
	var recs []Record
	used := 0
	var gerr error
	for {
		recs = append(recs, *normalize(got).(*Record))
		used += gn
		if used >= frameLen {
			break
		}
		got, gn, gerr = d.Decode(rest[used:])
		if gerr != nil {
			break
		}
	}
	if werr != nil {
		if gerr == nil || gerr.Error() != werr.Error() {
			t.Fatalf("Decode: %v; Decoder after %d records: %v", werr, len(recs), gerr)
		}
		return
	}
	if gerr != nil || used != wn {
		t.Fatalf("Decode used %d bytes; Decoder %d, %v", wn, used, gerr)
	}
	var w []Record
	switch f := normalize(want).(type) {
	case *Records:
		w = f.Records
	case *Runs:
		w = f.Records
	}
	if !reflect.DeepEqual(recs, w) {
		t.Fatalf("records differ:\n%#v\n%#v", recs, w)
	}
}

func BenchmarkDecoderRecord(b *testing.B) {
	raw := Append(nil, &Record{Index: 1, Offset: 1 << 30, Time: 1_700_000_000_000_000_000, OriginRegion: "eu", Payload: make([]byte, 100)})
	d := NewDecoder(Limits{})
	b.SetBytes(100)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := d.Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}
