package replica

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A catch-up's chunks are written unsynced (the install's synced batch makes them durable):
// each is written on the driver's goroutine, between rounds, and a synced write there holds
// up every group of the node for an fsync. A replica moved onto a node that leads other
// groups fetches one chunk per topic of its group (165 topics a group at 1,000 topics), so
// synced chunks stalled that node's groups for 200-640 ms per round in the grow campaign,
// and every publish pipelined behind theirs on a stream (answers go in order).
func TestCatchupChunksAreNotSynced(t *testing.T) {
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	src := startReplica(t, net, 1, vfs.NewMem(), []uint64{7}, []uint64{1})
	if err := src.d.Campaign(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	leaderOf(t, []*testReplica{src}, 7)
	proposeAll(t, []*testReplica{src}, 7, 40, "a")

	// The destination counts the syncs of its Pebble WAL.
	var syncs atomic.Int64
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				syncs.Add(1)
			}
		}
		return nil
	}))
	dst := startReplica(t, net, 2, fs, nil, nil)
	ctx := context.Background()
	const id = 99
	if err := dst.d.exec(ctx, func(e *engine) {
		e.catchups[7] = &catchup{id: id, group: 7, source: 1, sources: []uint64{1}, start: e.cfg.Now()}
	}); err != nil {
		t.Fatal(err)
	}
	span := Span{Log: "", From: 0, To: 40}
	before := syncs.Load()
	chunks := 0
	for next := span.From; next < span.To; {
		chunk, n, err := src.d.ReadChunk(7, "", next, span.To, 1) // one record a chunk
		if err != nil {
			t.Fatal(err)
		}
		type wrote struct {
			n   int
			err error
		}
		wc := make(chan wrote, 1)
		if err := dst.d.exec(ctx, func(e *engine) { n, err := e.fetchChunk(id, span, chunk, 1); wc <- wrote{n, err} }); err != nil {
			t.Fatal(err)
		}
		if w := <-wc; w.err != nil || w.n != int(n-next) {
			t.Fatalf("chunk at %d: wrote %d records, err %v; want %d", next, w.n, w.err, n-next)
		}
		next = n
		chunks++
	}
	// Nothing else runs on the destination (no group, no round to persist): any sync
	// meanwhile is a chunk's.
	if got := syncs.Load() - before; got > 0 {
		t.Fatalf("%d chunks written with %d syncs of the WAL: a catch-up's chunks must be written unsynced", chunks, got)
	}
	t.Logf("%d chunks written, 0 syncs", chunks)
}
