package wal

import (
	"testing"
	"unsafe"
)

// Within one read, a repeated origin region or producer ID is converted to a string once;
// the string never aliases the stored value, and a different value is decoded as itself.
func TestDecodeReusesRepeatedStrings(t *testing.T) {
	var s slab
	decode := func(off uint64, r Record) Record {
		t.Helper()
		key, val := encodeForTest(1, off, &r, 1, 0)
		got, reason := decodeRecord(key, val, &s)
		if reason != "" {
			t.Fatalf("decode %d: %s", off, reason)
		}
		clear(val) // the decoded strings must not share the value's memory
		return got
	}
	a := decode(0, Record{OriginRegion: "us", OriginOffset: 5, ProducerID: "p1", Sequence: 1})
	b := decode(1, Record{OriginRegion: "us", OriginOffset: 6, ProducerID: "p1", Sequence: 2})
	c := decode(2, Record{OriginRegion: "eu", OriginOffset: 7, ProducerID: "p2", Sequence: 1})
	if a.OriginRegion != "us" || a.ProducerID != "p1" || b.OriginRegion != "us" || b.ProducerID != "p1" {
		t.Fatalf("decoded %+v, %+v", a, b)
	}
	if unsafe.StringData(a.OriginRegion) != unsafe.StringData(b.OriginRegion) ||
		unsafe.StringData(a.ProducerID) != unsafe.StringData(b.ProducerID) {
		t.Fatal("a repeated origin region or producer ID was allocated again")
	}
	if c.OriginRegion != "eu" || c.ProducerID != "p2" || a.OriginRegion != "us" || a.ProducerID != "p1" {
		t.Fatalf("after a different value: %+v, earlier %+v", c, a)
	}
}
