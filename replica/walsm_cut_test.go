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
