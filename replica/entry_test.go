package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/wal"
)

func sampleEntries() []*WalEntry {
	return []*WalEntry{
		{Kind: EntryAppend, Topic: "orders.eu", Records: []wal.Record{
			{Payload: []byte("a")},
			{ProducerID: "p1", Sequence: 7, Payload: []byte("b"), Headers: []wal.Header{{Key: "k", Value: []byte("v")}, {Key: "", Value: nil}}},
			{Payload: nil},
		}},
		{Kind: EntryMirrorAppend, Topic: "t", Region: "us", Name: "mirror/us", HasExpected: true, Expected: 9, Value: 11,
			Records: []wal.Record{{OriginOffset: 10, Payload: []byte("x")}, {OriginOffset: 11, ProducerID: "q", Sequence: 1}}},
		{Kind: EntryMirrorAppend, Topic: "t", Region: "us", Name: "mirror/us", Value: 3},
		{Kind: EntrySetPosition, Topic: "t", Name: "tenant/a/durable", Value: 1 << 40},
	}
}

func sameEntry(a, b *WalEntry) bool {
	if a.Kind != b.Kind || a.Topic != b.Topic || a.Region != b.Region || a.Name != b.Name ||
		a.HasExpected != b.HasExpected || a.Expected != b.Expected || a.Value != b.Value || len(a.Records) != len(b.Records) {
		return false
	}
	for i := range a.Records {
		x, y := a.Records[i], b.Records[i]
		if x.ProducerID != y.ProducerID || x.Sequence != y.Sequence || !bytes.Equal(x.Payload, y.Payload) || len(x.Headers) != len(y.Headers) {
			return false
		}
		if a.Kind == EntryMirrorAppend && x.OriginOffset != y.OriginOffset {
			return false
		}
		for j := range x.Headers {
			if x.Headers[j].Key != y.Headers[j].Key || !bytes.Equal(x.Headers[j].Value, y.Headers[j].Value) {
				return false
			}
		}
	}
	return true
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range sampleEntries() {
		p, err := EncodeEntry(nil, e)
		if err != nil {
			t.Fatalf("%v: %v", e.Kind, err)
		}
		got, err := DecodeEntry(p)
		if err != nil {
			t.Fatalf("%v: %v", e.Kind, err)
		}
		if !sameEntry(e, got) {
			t.Fatalf("%v: decoded %+v, want %+v", e.Kind, got, e)
		}
		// Every truncation and every single flipped bit is refused.
		for n := range len(p) {
			if _, err := DecodeEntry(p[:n]); !errors.Is(err, errEntry) {
				t.Fatalf("%v truncated to %d bytes: %v", e.Kind, n, err)
			}
		}
		for i := range len(p) * 8 {
			q := bytes.Clone(p)
			q[i/8] ^= 1 << (i % 8)
			if _, err := DecodeEntry(q); !errors.Is(err, errEntry) {
				t.Fatalf("%v with bit %d flipped: %v", e.Kind, i, err)
			}
		}
	}
}

func TestEntryValidate(t *testing.T) {
	long := strings.Repeat("x", wal.MaxNameLen+1)
	for _, tc := range []struct {
		e    WalEntry
		want string
	}{
		{WalEntry{Kind: EntryAppend, Records: []wal.Record{{}}}, "empty topic"},
		{WalEntry{Kind: EntryAppend, Topic: "t"}, "without records"},
		{WalEntry{Kind: EntryAppend, Topic: long, Records: []wal.Record{{}}}, "topic of 256 bytes"},
		{WalEntry{Kind: EntryMirrorAppend, Topic: "t", Name: "c"}, "empty origin region"},
		{WalEntry{Kind: EntryMirrorAppend, Topic: "t", Region: "r"}, "empty cursor name"},
		{WalEntry{Kind: EntrySetPosition, Topic: "t"}, "empty position name"},
		{WalEntry{Kind: 9, Topic: "t"}, "unknown entry kind 9"},
		{WalEntry{Kind: EntryAppend, Topic: "t", Records: []wal.Record{{ProducerID: long}}}, "record 0: producer ID of 256 bytes"},
	} {
		_, err := EncodeEntry(nil, &tc.e)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.e, err, tc.want)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, e := range sampleEntries() {
		p, _ := EncodeEntry(nil, e)
		f.Add(p)
	}
	f.Add([]byte{1, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, p []byte) {
		checkDecode(t, p)
		// The checksum stops almost every mutation: try the body behind a
		// correct one too, so the fuzzer reaches the field decoders.
		if len(p) >= entryHeaderLen {
			q := bytes.Clone(p)
			q[0] = entryVersion
			binary.LittleEndian.PutUint32(q[1:5], crc32.Checksum(q[5:], castagnoli))
			checkDecode(t, q)
		}
	})
}

func checkDecode(t *testing.T, p []byte) {
	e, err := DecodeEntry(p)
	if err != nil {
		if !errors.Is(err, errEntry) {
			t.Fatalf("error %v does not wrap errEntry", err)
		}
		return
	}
	// What decodes re-encodes to the same bytes (one encoding per entry).
	q, err := EncodeEntry(nil, e)
	if err != nil {
		t.Fatalf("decoded entry does not encode: %v", err)
	}
	if !bytes.Equal(p, q) {
		t.Fatalf("re-encoding differs:\n%x\n%x", p, q)
	}
}
