package replica

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/wal"
)

// TestWalSMReopenDiscardsUninstalledCatchup: a replica that fetched records for a snapshot
// (past a cut, so the fetch jumped over offsets it never held) and stopped before installing
// it reopens serving what it applied, not the fetched records past it with a hole below them.
// Found by the simulation (TestSimRegionWalBatched -seed 198: "read: wal: corrupt record
// "g101.1" at offset 2: durable record missing" after such a restart).
func TestWalSMReopenDiscardsUninstalledCatchup(t *testing.T) {
	src := newSnapSM(t)
	for i := range uint64(10) {
		src.apply(i+1, &WalEntry{Kind: EntryAppend, Topic: "a", Records: []wal.Record{{Payload: []byte{byte(i)}}}})
	}
	src.apply(11, &WalEntry{Kind: EntryTruncate, Topic: "a", Value: 6})
	_, data, err := src.sm.SnapshotData(7)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	dst := openSnapSM(t, dir)
	for i := range uint64(2) { // the same first entries: "a" holds offsets 0 and 1
		dst.apply(i+1, &WalEntry{Kind: EntryAppend, Topic: "a", Records: []wal.Record{{Payload: []byte{byte(i)}}}})
	}
	spans, err := dst.sm.Missing(7, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 || spans[0].From != 6 || spans[0].To != 10 {
		t.Fatalf("missing %+v, want a from 6 to 10 (past the cut)", spans)
	}
	sp := spans[0]
	for next := sp.From; next < sp.To; {
		chunk, n, err := src.sm.ReadChunk(7, sp.Log, next, sp.To, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		dst.commit(func(b *pebble.Batch) error { _, err := dst.sm.ImportChunk(b, 7, sp.Log, sp.To, chunk); return err })
		next = n
	}
	dst.log.Close() // stopped before the snapshot was installed

	dst = openSnapSM(t, dir)
	first, next, ok := dst.log.Bounds("a")
	if !ok || first != 0 || next != 2 {
		t.Fatalf("reopened: serves a from %d to %d (%v), want [0, 2): what it applied", first, next, ok)
	}
	recs, err := dst.log.Read("a", 0, 10, 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("reopened: read from 0: %d records, %v; want 2", len(recs), err)
	}
	// The next entry applies after what it applied, and the group's log goes on densely.
	dst.apply(3, &WalEntry{Kind: EntryAppend, Topic: "a", Records: []wal.Record{{Payload: []byte{2}}}})
	if _, next, _ := dst.log.Bounds("a"); next != 3 {
		t.Fatalf("after the next apply: next %d, want 3", next)
	}
}
