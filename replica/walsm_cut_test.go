package replica

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/wal"
)

// fetchAll fetches every span dst's Missing asks for from src's log, chunk by chunk,
// the way the engine's catch-up does.
func fetchAll(t *testing.T, dst, src *snapSM, data []byte) {
	t.Helper()
	spans, err := dst.sm.Missing(7, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range spans {
		for next := sp.From; next < sp.To; {
			chunk, n, err := src.sm.ReadChunk(7, sp.Log, next, sp.To, 64)
			if err != nil {
				t.Fatal(err)
			}
			b := dst.log.DB().NewBatch()
			if _, err := dst.sm.ImportChunk(b, 7, sp.Log, sp.To, chunk); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(nil); err != nil {
				t.Fatal(err)
			}
			b.Close()
			next = n
		}
	}
}

func (s *snapSM) install(index uint64, data []byte) {
	s.t.Helper()
	var after func() error
	s.commit(func(b *pebble.Batch) error {
		var err error
		after, err = s.sm.Restore(b, 7, index, data)
		return err
	})
	if err := after(); err != nil {
		s.t.Fatal(err)
	}
}

func appendN(s *snapSM, idx *uint64, topic string, n int) {
	for range n {
		*idx++
		s.apply(*idx, &WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{{Payload: []byte{byte(*idx)}}}})
	}
}

// TestWalSMCutsAndSnapshotLogStart: a truncate entry cuts the same offsets on every
// replica that applies it (never past the next offset; a cut the log passed is a no-op;
// a purge cuts everything), and a snapshot carries the log start: a replica whose log
// ends before it, or that has none, fetches only the records at or above it and ends
// with the same bounds and records; a fetch from a peer cut further is refused with an
// error saying so.
func TestWalSMCutsAndSnapshotLogStart(t *testing.T) {
	src, lag := newSnapSM(t), newSnapSM(t)
	var idx, lagIdx uint64
	appendN(src, &idx, "a", 5)
	appendN(lag, &lagIdx, "a", 5) // lag holds [0, 5) and falls behind
	appendN(src, &idx, "a", 15)
	idx++
	src.apply(idx, &WalEntry{Kind: EntryTruncate, Topic: "a", Value: 12})
	idx++
	src.apply(idx, &WalEntry{Kind: EntryTruncate, Topic: "a", Value: 8}) // passed: no-op
	idx++
	src.apply(idx, &WalEntry{Kind: EntryTruncate, Topic: "a", Value: 99}) // clamped to next
	if first, next, _ := src.log.Bounds("a"); first != 20 || next != 20 {
		t.Fatalf("after cuts at 12, 8 and 99: [%d, %d), want [20, 20)", first, next)
	}
	appendN(src, &idx, "a", 10)
	idx++
	src.apply(idx, &WalEntry{Kind: EntryTruncate, Topic: "a", Value: 25})
	if first, next, _ := src.log.Bounds("a"); first != 25 || next != 30 {
		t.Fatalf("after a cut at 25: [%d, %d), want [25, 30)", first, next)
	}
	appendN(src, &idx, "b", 3)
	idx++
	src.apply(idx, &WalEntry{Kind: EntryTruncate, Topic: "b", Purge: true})
	snapIdx, data, err := src.sm.SnapshotData(7)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := src.log.Read("a", 25, 100, 0)

	// A replica whose log ends (at 5) before the snapshot's start (25), and an empty one.
	empty := newSnapSM(t)
	for _, dst := range []*snapSM{lag, empty} {
		fetchAll(t, dst, src, data)
		dst.install(snapIdx, data)
		for _, topic := range []string{"a", "b"} {
			sf, sn, _ := src.log.Bounds(topic)
			df, dn, ok := dst.log.Bounds(topic)
			if !ok || df != sf || dn != sn {
				t.Fatalf("%s after install: [%d, %d) %v, the source has [%d, %d)", topic, df, dn, ok, sf, sn)
			}
		}
		got, err := dst.log.Read("a", 25, 100, 0)
		if err != nil || len(got) != len(want) {
			t.Fatalf("read after install: %d records, %v; want %d", len(got), err, len(want))
		}
		for i := range got {
			if got[i].Offset != want[i].Offset || got[i].Time != want[i].Time || string(got[i].Payload) != string(want[i].Payload) {
				t.Fatalf("record %d: %+v, the source has %+v", i, got[i], want[i])
			}
		}
		// Entries after the snapshot apply on top, at the same offsets.
		di := snapIdx
		appendN(dst, &di, "a", 2)
		if _, next, _ := dst.log.Bounds("a"); next != 32 {
			t.Fatalf("next after two appends: %d, want 32", next)
		}
	}

	// A fetch asking below what the peer keeps now is refused, naming the cut.
	_, _, err = src.sm.ReadChunk(7, "a", 20, 30, 64)
	if err == nil || !strings.Contains(err.Error(), "were cut here since the snapshot") {
		t.Fatalf("fetch below the peer's log start: %v", err)
	}
}

// TestWalSMForget: a forget entry deletes a topic's records, positions, group states and
// configuration, those written earlier in its own batch too, and leaves the topic bound
// with its offsets going on; other topics keep theirs.
func TestWalSMForget(t *testing.T) {
	s := newSnapSM(t)
	var idx uint64
	appendN(s, &idx, "c", 4)
	appendN(s, &idx, "a", 2)
	idx++
	s.apply(idx, &WalEntry{Kind: EntrySetPosition, Topic: "c", Name: "durable-1", Value: 2})
	idx++
	s.apply(idx, &WalEntry{Kind: EntrySetPosition, Topic: "a", Name: "durable-1", Value: 1})
	idx++
	s.apply(idx, &WalEntry{Kind: EntrySetGroup, Topic: "c", Name: "g1", Group: &GroupOp{
		Settings: &wal.GroupSettings{Pattern: "c"}, State: &wal.GroupState{Floor: 1, Next: 2}}})
	idx++
	s.apply(idx, &WalEntry{Kind: EntrySetConfig, Topic: "c", Config: wal.TopicConfig{RetentionSet: true, Retention: wal.Retention{MaxBytes: 1 << 20}}})
	// One batch: a position and a group state written, then the forget.
	var ents []Entry
	for _, e := range []*WalEntry{
		{Kind: EntrySetPosition, Topic: "c", Name: "durable-2", Value: 3},
		{Kind: EntrySetGroup, Topic: "c", Name: "g2", Group: &GroupOp{Settings: &wal.GroupSettings{Pattern: "c"}, State: &wal.GroupState{Floor: 0, Next: 1}}},
		{Kind: EntryForget, Topic: "c"},
	} {
		data, err := EncodeEntry(nil, e)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		ents = append(ents, Entry{Index: idx, Time: int64(idx) * 1000, Data: data})
	}
	var res []Result
	s.commit(func(b *pebble.Batch) error {
		var err error
		res, err = s.sm.Apply(b, 7, idx, ents)
		return err
	})
	if tr, ok := res[2].Detail.(*TruncateResult); !ok || tr.First != 0 || tr.Cut != 4 || tr.Next != 4 {
		t.Fatalf("forget result: %+v", res[2].Detail)
	}
	if first, next, ok := s.log.Bounds("c"); !ok || first != 4 || next != 4 {
		t.Fatalf("c after forget: [%d, %d) %v", first, next, ok)
	}
	for _, name := range []string{"durable-1", "durable-2"} {
		if v, ok, err := s.log.Position(name, "c"); err != nil || ok {
			t.Fatalf("position %s of c after forget: %d %v %v", name, v, ok, err)
		}
	}
	if v, ok, _ := s.log.Position("durable-1", "a"); !ok || v != 1 {
		t.Fatalf("a's position went with c's: %d %v", v, ok)
	}
	if cfg, _ := s.log.TopicConfig("c"); cfg != (wal.TopicConfig{}) {
		t.Fatalf("c's configuration after forget: %v", cfg)
	}
	meta, err := s.sm.w.TopicMeta("c")
	if err != nil || len(meta) != 0 {
		t.Fatalf("metadata of c left after forget: %d keys, %v", len(meta), err)
	}
	appendN(s, &idx, "c", 1)
	if first, next, _ := s.log.Bounds("c"); first != 4 || next != 5 {
		t.Fatalf("c after an append: [%d, %d), want [4, 5)", first, next)
	}
}
