package wal

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"testing"
)

func encodeForTest(id uint32, off uint64, r *Record, tm int64, pos uint64) (key, val []byte) {
	key = recordKey(id, off)
	val = make([]byte, encodedLen(r))
	encodeRecord(val, key, r, tm, pos)
	return key, val
}

func TestRecordEncoding(t *testing.T) {
	for _, r := range []Record{
		{},
		{Payload: []byte("p")},
		{OriginRegion: "us-east", OriginOffset: math.MaxUint64, Payload: bytes.Repeat([]byte("z"), 300)},
		{ProducerID: "prod", Sequence: 1 << 40},
		{Sequence: 3}, // a sequence without a producer id survives
		{Headers: []Header{{Key: "a", Value: []byte("b")}, {Key: "", Value: []byte{}}, {Key: "c"}}, Payload: []byte{0, 1, 2}},
	} {
		key, val := encodeForTest(7, 42, &r, -5, 1000)
		var s slab
		got, reason := decodeRecord(key, val, &s)
		if reason != "" {
			t.Fatalf("decode %+v: %s", r, reason)
		}
		want := r
		want.Offset, want.Time = 42, -5
		if want.OriginRegion == "" {
			want.OriginOffset = 42
		}
		normalize(&want)
		normalize(&got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
		tm, pos, reason := checkRecord(key, val)
		if tm != -5 || pos != 1000 || reason != "" {
			t.Errorf("checkRecord = %d %d %q", tm, pos, reason)
		}
		// Every single-bit flip is caught.
		for i := range val {
			for bit := range 8 {
				val[i] ^= 1 << bit
				if _, reason := decodeRecord(key, val, &s); reason == "" {
					t.Fatalf("flip of bit %d of byte %d not detected", bit, i)
				}
				val[i] ^= 1 << bit
			}
		}
		// The same value under another key is caught.
		if _, reason := decodeRecord(recordKey(7, 43), val, &s); reason == "" {
			t.Fatal("value under the wrong key not detected")
		}
	}
}

// normalize maps nil and empty byte slices to nil, which the encoding does
// not distinguish.
func normalize(r *Record) {
	if len(r.Payload) == 0 {
		r.Payload = nil
	}
	for i := range r.Headers {
		if len(r.Headers[i].Value) == 0 {
			r.Headers[i].Value = nil
		}
	}
}

func TestPositionKey(t *testing.T) {
	for _, tc := range [][2]string{{"t", "n"}, {"", ""}, {"ab", "c"}, {"a", "bc"}, {string(bytes.Repeat([]byte("x"), 255)), "y"}} {
		k := positionKey(tc[0], tc[1])
		topic, name, ok := parsePositionKey(k)
		if !ok || topic != tc[0] || name != tc[1] {
			t.Errorf("positionKey(%q, %q) parses as %q %q %v", tc[0], tc[1], topic, name, ok)
		}
	}
	if bytes.Equal(positionKey("ab", "c"), positionKey("a", "bc")) {
		t.Error("position keys collide")
	}
}

// FuzzDecodeRecord: bytes from disk are untrusted. The decoder never panics,
// never allocates more than the input can describe, and whatever it accepts
// re-encodes to exactly the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []Record{
		{Payload: []byte("hello")},
		{OriginRegion: "eu", OriginOffset: 9, ProducerID: "p", Sequence: 2, Headers: []Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("x")},
	} {
		key, val := encodeForTest(1, 5, &r, 123, 456)
		f.Add(key, val)
	}
	f.Add(recordKey(1, 1), []byte{})
	f.Add([]byte("m"), make([]byte, recordFixedLen))
	f.Fuzz(func(t *testing.T, key, val []byte) {
		var s slab
		rec, reason := decodeRecord(key, val, &s)
		if reason != "" {
			return
		}
		id, off, _ := parseRecordKey(key)
		_, pos, _ := checkRecord(key, val)
		key2, val2 := encodeForTest(id, off, &rec, rec.Time, pos)
		if !bytes.Equal(key2, key) || !bytes.Equal(val2, val) {
			t.Fatalf("accepted value does not re-encode:\n in  %x\n out %x", val, val2)
		}
	})
}

// FuzzDecodeRecordChecksummed fuzzes past the CRC: the fuzzer's bytes are
// sealed with a valid checksum first, so the structure decoder is reached.
func FuzzDecodeRecordChecksummed(f *testing.F) {
	r := Record{OriginRegion: "eu", OriginOffset: 9, ProducerID: "p", Sequence: 2, Headers: []Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("x")}
	_, val := encodeForTest(1, 5, &r, 123, 456)
	f.Add(val[4:])
	f.Add([]byte{1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, body []byte) {
		key := recordKey(1, 5)
		val := append(make([]byte, 4), body...)
		binary.LittleEndian.PutUint32(val, recordCRC(key, val))
		var s slab
		rec, reason := decodeRecord(key, val, &s)
		if reason != "" {
			return
		}
		_, pos, _ := checkRecord(key, val)
		_, val2 := encodeForTest(1, 5, &rec, rec.Time, pos)
		if !bytes.Equal(val2, val) {
			t.Fatalf("accepted value does not re-encode:\n in  %x\n out %x", val, val2)
		}
	})
}
