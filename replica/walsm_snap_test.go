package replica

import (
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/wal"
)

// snapSM is a WalSM on a wal.Log of its own (t.TempDir()) whose group 7 holds topics "a",
// "b" and "c", applied to directly, without a driver.
type snapSM struct {
	t   *testing.T
	log *wal.Log
	sm  *WalSM
}

func newSnapSM(t *testing.T) *snapSM {
	t.Helper()
	return openSnapSM(t, t.TempDir())
}

// openSnapSM opens (or reopens) a WalSM over the log in dir, its topics all in group 7.
func openSnapSM(t *testing.T, dir string) *snapSM {
	t.Helper()
	l, err := wal.Open(dir, wal.Options{RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sm, err := NewWalSM(WalSMConfig{Log: l, DedupWindow: 8, GroupOf: func(string) uint64 { return 7 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sm.Applied(7); err != nil {
		t.Fatal(err)
	}
	return &snapSM{t: t, log: l, sm: sm}
}

// commit runs stage on a batch, commits it and tells the state machine.
func (s *snapSM) commit(stage func(b *pebble.Batch) error) {
	s.t.Helper()
	b := s.log.DB().NewBatch()
	defer b.Close()
	if err := stage(b); err != nil {
		s.t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		s.t.Fatal(err)
	}
	s.sm.Committed()
}

func (s *snapSM) apply(index uint64, e *WalEntry) {
	s.t.Helper()
	data, err := EncodeEntry(nil, e)
	if err != nil {
		s.t.Fatal(err)
	}
	s.commit(func(b *pebble.Batch) error {
		_, err := s.sm.Apply(b, 7, index, []Entry{{Index: index, Time: int64(index) * 1000, Data: data}})
		return err
	})
}

// TestWalSMSnapshotCarriesMetadataAndFetchedRecords: a snapshot of a group with records,
// a de-duplication window, positions and a topic with a position only, installed on an
// empty replica after its records were fetched chunk by chunk, gives the same records
// (offsets, times, producer fields), positions and window; a chunk out of place and
// damaged snapshot data are refused.
func TestWalSMSnapshotCarriesMetadataAndFetchedRecords(t *testing.T) {
	src := newSnapSM(t)
	idx := uint64(0)
	for i := range 30 {
		idx++
		topic := "a"
		if i%3 == 0 {
			topic = "b"
		}
		src.apply(idx, &WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{
			{ProducerID: "p", Sequence: uint64(i + 1), Payload: []byte{byte(i)}, Headers: []wal.Header{{Key: "k", Value: []byte{byte(i)}}}},
			{Payload: []byte("plain")},
		}})
	}
	idx++
	src.apply(idx, &WalEntry{Kind: EntrySetPosition, Topic: "a", Name: "worker", Value: 17})
	idx++
	src.apply(idx, &WalEntry{Kind: EntrySetPosition, Topic: "c", Name: "only", Value: 3})
	applied, data, err := src.sm.SnapshotData(7)
	if err != nil || applied != idx {
		t.Fatalf("snapshot: applied %d, %v; want %d", applied, err, idx)
	}

	dst := newSnapSM(t)
	spans, err := dst.sm.Missing(7, data)
	if err != nil {
		t.Fatal(err)
	}
	want := []Span{{Log: "a", From: 0, To: 40}, {Log: "b", From: 0, To: 20}}
	if !reflect.DeepEqual(spans, want) {
		t.Fatalf("missing %+v, want %+v", spans, want)
	}
	for _, sp := range spans {
		for next := sp.From; next < sp.To; {
			chunk, n, err := src.sm.ReadChunk(7, sp.Log, next, sp.To, 20)
			if err != nil {
				t.Fatal(err)
			}
			if next > 0 {
				// A chunk that does not start at the next offset is refused.
				again, _, _ := src.sm.ReadChunk(7, sp.Log, next-1, sp.To, 20)
				b := dst.log.DB().NewBatch()
				if _, err := dst.sm.ImportChunk(b, 7, sp.Log, sp.To, again); err == nil {
					t.Fatalf("%s: a chunk from %d accepted at %d", sp.Log, next-1, next)
				}
				b.Close()
			}
			dst.commit(func(b *pebble.Batch) error { _, err := dst.sm.ImportChunk(b, 7, sp.Log, sp.To, chunk); return err })
			next = n
		}
		if _, next, _ := dst.log.Bounds(sp.Log); next != 0 {
			t.Fatalf("%s: fetched records served before the snapshot is installed (next %d)", sp.Log, next)
		}
	}
	if spans, _ := dst.sm.Missing(7, data); len(spans) != 0 {
		t.Fatalf("still missing %+v after the fetch", spans)
	}
	for i, bad := range [][]byte{data[:len(data)-1], append(append([]byte(nil), data[:len(data)-1]...), data[len(data)-1]^1), {9}} {
		b := dst.log.DB().NewBatch()
		if _, err := dst.sm.Restore(b, 7, idx, bad); err == nil {
			t.Fatalf("damaged snapshot %d restored", i)
		}
		b.Close()
	}
	var after func() error
	dst.commit(func(b *pebble.Batch) error {
		var err error
		after, err = dst.sm.Restore(b, 7, idx, data)
		return err
	})
	if err := after(); err != nil {
		t.Fatal(err)
	}
	if got, err := dst.sm.Applied(7); err != nil || got != idx {
		t.Fatalf("applied after restore %d, %v; want %d", got, err, idx)
	}
	for _, topic := range []string{"a", "b"} {
		_, next, _ := src.log.Bounds(topic)
		a, _ := src.log.Read(topic, 0, int(next), 0)
		b, _ := dst.log.Read(topic, 0, int(next), 0)
		if len(a) == 0 || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: records differ after the install:\n%+v\n%+v", topic, a, b)
		}
	}
	for _, p := range []struct {
		name, topic string
		v           uint64
	}{{"worker", "a", 17}, {"only", "c", 3}} {
		if v, ok, err := dst.log.Position(p.name, p.topic); err != nil || !ok || v != p.v {
			t.Fatalf("position %s of %s after the install: %d %v %v, want %d", p.name, p.topic, v, ok, err, p.v)
		}
	}
	// The window came along: a retry is answered with its original offset on both.
	idx++
	retry := &WalEntry{Kind: EntryAppend, Topic: "a", Records: []wal.Record{{ProducerID: "p", Sequence: 29, Payload: []byte{28}}}}
	for _, s := range []*snapSM{src, dst} {
		data, _ := EncodeEntry(nil, retry)
		var res []Result
		s.commit(func(b *pebble.Batch) error {
			var err error
			res, err = s.sm.Apply(b, 7, idx, []Entry{{Index: idx, Time: int64(idx) * 1000, Data: data}})
			return err
		})
		ar := res[0].Detail.(*wal.AppendResult)
		if len(ar.Skipped) != 1 || ar.Skipped[0].Offset != 36 {
			t.Fatalf("retry of sequence 29: %+v, want the duplicate of offset 36", ar)
		}
	}
}
