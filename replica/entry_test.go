package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/quicmq/quicmq/wal"
)

func sampleEntries() []*WalEntry {
	return append([]*WalEntry{
		{Kind: EntryAppend, Topic: "orders.eu", Records: []wal.Record{
			{Payload: []byte("a")},
			{ProducerID: "p1", Sequence: 7, Payload: []byte("b"), Headers: []wal.Header{{Key: "k", Value: []byte("v")}, {Key: "", Value: nil}}},
			{Payload: nil},
		}},
		{Kind: EntryMirrorAppend, Topic: "t", Region: "us", Name: "mirror/us", HasExpected: true, Expected: 9, Value: 11,
			Records: []wal.Record{{OriginOffset: 10, Payload: []byte("x")}, {OriginOffset: 11, ProducerID: "q", Sequence: 1}}},
		{Kind: EntryMirrorAppend, Topic: "t", Region: "us", Name: "mirror/us", Value: 3},
		{Kind: EntrySetPosition, Topic: "t", Name: "tenant/a/durable", Value: 1 << 40},
		{Kind: EntrySetGroup, Topic: "t", Name: "tenant/a/workers", Group: &GroupOp{
			Settings: &wal.GroupSettings{Pattern: "t", AckWait: 30 * time.Second, MaxDeliver: 5, DeadLetter: "t.dlq", Order: 2},
			State:    &wal.GroupState{Floor: 7, Next: 1 << 33, Entries: []wal.GroupEntry{{Offset: 7, Deliveries: 1}, {Offset: 9, Deliveries: 1<<32 - 1}, {Offset: 1<<33 - 1, Deliveries: 0}}},
		}},
		{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{State: &wal.GroupState{Floor: 3, Next: 3}}},
		{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{Settings: &wal.GroupSettings{Pattern: "t.>"}}},
		{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{Remove: true}},
		{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{}}, // a barrier
		{Kind: EntryTruncate, Topic: "t", Value: 1 << 35},
		{Kind: EntryTruncate, Topic: "t", Purge: true},
		{Kind: EntrySetConfig, Topic: "t", Config: wal.TopicConfig{RetentionSet: true, Retention: wal.Retention{MaxAge: time.Hour, MaxBytes: 1 << 40}}},
		{Kind: EntrySetConfig, Topic: "t", Config: wal.TopicConfig{RetentionSet: true}}, // kept forever
		{Kind: EntrySetConfig, Topic: "t"},                                              // back to the node's default
		{Kind: EntryForget, Topic: "t"},
	}, vectorEntries()...) // entry_vector_test.go
}

func sameEntry(a, b *WalEntry) bool {
	if a.Kind != b.Kind || a.Topic != b.Topic || a.Region != b.Region || a.Name != b.Name ||
		a.HasExpected != b.HasExpected || a.Expected != b.Expected || a.Value != b.Value || len(a.Records) != len(b.Records) ||
		a.Purge != b.Purge || a.Config != b.Config {
		return false
	}
	if (a.Kind == EntrySetGroup || a.Kind == EntryMirrorGroup) && !sameGroupOp(a.Group, b.Group) {
		return false
	}
	if !maps.Equal(a.Vector, b.Vector) {
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
		{WalEntry{Kind: 10, Topic: "t"}, "unknown entry kind 10"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t"}, "empty group name"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{Remove: true, State: &wal.GroupState{}}}, "a group removal that also stores"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{Settings: &wal.GroupSettings{}}}, "empty pattern"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{Settings: &wal.GroupSettings{Pattern: "t", Order: 3}}}, "unknown group order 3"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{Settings: &wal.GroupSettings{Pattern: "t", AckWait: -1}}}, "negative group ack-wait"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{State: &wal.GroupState{Floor: 5, Next: 4}}}, "below its floor"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{State: &wal.GroupState{Floor: 1, Next: 9,
			Entries: []wal.GroupEntry{{Offset: 3}, {Offset: 3}}}}}, "entry 1 (offset 3): not ascending"},
		{WalEntry{Kind: EntrySetGroup, Topic: "t", Name: "g", Group: &GroupOp{State: &wal.GroupState{Floor: 1, Next: 9,
			Entries: []wal.GroupEntry{{Offset: 9}}}}}, "entry 0 (offset 9): not ascending within [1, 9)"},
		{WalEntry{Kind: EntryAppend, Topic: "t", Records: []wal.Record{{ProducerID: long}}}, "record 0: producer ID of 256 bytes"},
		{WalEntry{Kind: EntryTruncate, Topic: "t", Purge: true, Value: 3}, "a purge with an offset"},
		{WalEntry{Kind: EntryForget, Topic: "t", Value: 3}, "a forget with records or an offset"},
		{WalEntry{Kind: EntryTruncate, Topic: "t", Value: 3, Records: []wal.Record{{}}}, "a truncate with records"},
		{WalEntry{Kind: EntrySetConfig, Topic: "t", Config: wal.TopicConfig{RetentionSet: true, Retention: wal.Retention{MaxAge: -1}}}, "negative retention"},
		{WalEntry{Kind: EntrySetConfig, Topic: "t", Config: wal.TopicConfig{Retention: wal.Retention{MaxBytes: 5}}}, "retention given but not set"},
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
	// The view WalSM applies with decodes alike: the same error, or the same bytes again.
	v, verr := decodeEntryView(p)
	if (err == nil) != (verr == nil) || err != nil && err.Error() != verr.Error() {
		t.Fatalf("DecodeEntry: %v; decodeEntryView: %v", err, verr)
	}
	// ... and so does WalSM's, into one entry reused from a decode with more records, each
	// with a producer and headers, and the topic's name from its group's map.
	into := dirtyEntry(t)
	names := map[string]*walTopic{}
	if e != nil {
		names[e.Topic] = &walTopic{name: strings.Clone(e.Topic)}
	}
	ierr := decodeEntryInto(p, into, names)
	if (err == nil) != (ierr == nil) || err != nil && err.Error() != ierr.Error() {
		t.Fatalf("DecodeEntry: %v; decodeEntryInto: %v", err, ierr)
	}
	if err != nil {
		if !errors.Is(err, errEntry) {
			t.Fatalf("error %v does not wrap errEntry", err)
		}
		return
	}
	if iq, err := EncodeEntry(nil, into); err != nil || !bytes.Equal(p, iq) {
		t.Fatalf("the reused entry re-encodes differently (%v):\n%x\n%x", err, p, iq)
	}
	if unsafe.StringData(into.Topic) != unsafe.StringData(names[e.Topic].name) {
		t.Fatalf("decodeEntryInto made a new string of topic %q, which its map holds", e.Topic)
	}
	if vq, err := EncodeEntry(nil, v); err != nil || !bytes.Equal(p, vq) {
		t.Fatalf("the view re-encodes differently (%v):\n%x\n%x", err, p, vq)
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

// dirtyEntry is an entry decoded (decodeEntryInto) from an append of 16 records, each with
// every optional field set, for a decode into it to overwrite.
func dirtyEntry(t *testing.T) *WalEntry {
	t.Helper()
	recs := make([]wal.Record, 16)
	for i := range recs {
		recs[i] = wal.Record{ProducerID: "dirty", Sequence: uint64(i + 1), Offset: 9, Time: 9, OriginRegion: "x", OriginOffset: 9,
			Headers: []wal.Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("dirty payload")}
	}
	p, err := EncodeEntry(nil, &WalEntry{Kind: EntryMirrorAppend, Topic: "dirty.topic", Region: "r", Name: "n", Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	e := &WalEntry{}
	if err := decodeEntryInto(p, e, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func sameGroupOp(a, b *GroupOp) bool {
	if !a.stores() || !b.stores() {
		return a.stores() == b.stores()
	}
	if a.Remove != b.Remove || (a.Settings == nil) != (b.Settings == nil) || (a.State == nil) != (b.State == nil) {
		return false
	}
	if a.Settings != nil && *a.Settings != *b.Settings {
		return false
	}
	if a.State != nil {
		x, y := a.State, b.State
		if x.Floor != y.Floor || x.Next != y.Next || len(x.Entries) != len(y.Entries) {
			return false
		}
		for i := range x.Entries {
			if x.Entries[i] != y.Entries[i] {
				return false
			}
		}
		if !x.Updated.Equal(y.Updated) || !sameGroupVector(x.Vector, y.Vector) {
			return false
		}
	}
	return true
}

// TestEntrySetGroupRefusesBadBodies: a set group body that decodes wrong is
// refused with an error naming the problem.
func TestEntrySetGroupRefusesBadBodies(t *testing.T) {
	body := func(b ...byte) []byte {
		p := append([]byte{entryVersion, 0, 0, 0, 0, byte(EntrySetGroup), 1, 't', 1, 'g'}, b...)
		binary.LittleEndian.PutUint32(p[1:5], crc32.Checksum(p[5:], castagnoli))
		return p
	}
	for _, tc := range []struct {
		p    []byte
		want string
	}{
		{body(3, 0), "group layout 3 (this build knows up to 2)"},
		{body(2, 0), "group layout 2 (a vector) without a state"},
		{body(1, 8), "unknown group flags"},
		{body(1, 2, 5, 4, 1, 0, 1), "not ascending"},                           // entry at offset 5+0 < next 4
		{body(1, 2, 0, 9, 100), "entry count past the end"},                    // 100 entries in no bytes
		{body(1, 2, 0, 9, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x10), "out of range"}, // deliveries 2^32
		{body(1, 1, 1, 't', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0), "ack-wait past"},
		{body(1, 4, 0), "bytes after the end"},
	} {
		_, err := DecodeEntry(tc.p)
		if !errors.Is(err, errEntry) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("% x: error %v, want one naming %q", tc.p, err, tc.want)
		}
	}
}
