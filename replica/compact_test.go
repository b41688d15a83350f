package replica

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quicmq/quicmq/internal/testlog"
)

// logBounds is a running replica's first and last raft index of group g.
func logBounds(t *testing.T, r *testReplica, g uint64) (first, last uint64) {
	t.Helper()
	ch := make(chan *Storage, 1)
	if err := r.d.exec(context.Background(), func(e *engine) { ch <- e.groups[g].st }); err != nil {
		t.Fatal(err)
	}
	st := <-ch
	first, _ = st.FirstIndex()
	last, _ = st.LastIndex()
	return first, last
}

// With LogCompaction the leader compacts every replica's log, but never
// past an entry a follower that is down still lacks while it is within
// LogTailEntries: the follower catches up from the log when it returns.
// Past the tail the log is compacted anyway; the follower then catches up
// through a snapshot (metadata only) and the records fetched from its
// leader's log, and ends with the same records at the same offsets.
func TestDriverLogCompactionWaitsForFollowersWithinTheTail(t *testing.T) {
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	peers := []uint64{1, 2, 3}
	fss := []vfs.FS{vfs.NewMem(), vfs.NewMem(), vfs.NewMem()}
	tune := func(c *Config) { c.LogCompaction, c.LogCompactEvery, c.LogTailEntries = true, 4, 40 }
	var rs []*testReplica
	for i, id := range peers {
		rs = append(rs, startReplicaWith(t, net, id, fss[i], []uint64{7}, peers, tune))
	}
	ctx := context.Background()
	if err := rs[0].d.Campaign(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if l := leaderOf(t, rs, 7); l != rs[0] {
		t.Skipf("node %d won the election", l.id)
	}
	proposeAll(t, rs, 7, 20, "a")
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, "every replica to compact its log", func() bool { f, _ := logBounds(t, r, 7); return f > 1 })
	}

	// Down for less than the tail: the leader keeps what node 3 lacks.
	rs[2].stop(t, net)
	_, behind := logBounds(t, rs[1], 7) // node 2 has what node 3 had: node 3 stopped after it applied
	proposeAll(t, rs[:2], 7, 20, "b")
	if f, _ := logBounds(t, rs[0], 7); f > behind+1 {
		t.Fatalf("the leader compacted to first index %d while node 3, down, may lack entries after %d", f, behind)
	}
	rs[2] = startReplicaWith(t, net, 3, fss[2], []uint64{7}, nil, tune)
	want, _ := rs[0].sm.Next(7)
	testlog.WaitFor(t, 20*time.Second, "node 3 to catch up from the log", func() bool { n, _ := rs[2].sm.Next(7); return n == want })

	// Down for more than the tail: compacted past what node 3 has.
	rs[2].stop(t, net)
	_, behind = logBounds(t, rs[1], 7)
	proposeAll(t, rs[:2], 7, 100, "c")
	testlog.WaitFor(t, 20*time.Second, "the leader to compact past node 3", func() bool { f, _ := logBounds(t, rs[0], 7); return f > behind+1 })
	rs[2] = startReplicaWith(t, net, 3, fss[2], []uint64{7}, nil, tune)
	testlog.WaitFor(t, 20*time.Second, "node 3 to hear from its leader", func() bool {
		st, err := rs[2].d.Status(ctx, 7)
		return err == nil && st.Lead == 1
	})
	for _, r := range proposeAll(t, rs[:2], 7, 5, "d") {
		if r.Offset < 140 {
			t.Fatalf("offset after node 3 returned = %d, want 140 or more", r.Offset)
		}
	}
	want, _ = rs[0].sm.Next(7)
	testlog.WaitFor(t, 20*time.Second, "node 3 to catch up through a snapshot", func() bool { n, _ := rs[2].sm.Next(7); return n == want })
	st, err := rs[2].d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotsApplied == 0 || st.CatchupsDone == 0 || st.CatchupRecords == 0 {
		t.Fatalf("node 3 caught up without a snapshot and a fetch: %+v", st)
	}
	a, err := rs[0].sm.Read(7, 0, int(want))
	if err != nil {
		t.Fatal(err)
	}
	b, err := rs[2].sm.Read(7, 0, int(want))
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != int(want) || !reflect.DeepEqual(a, b) {
		t.Fatalf("node 3's records differ from the leader's: %d and %d records", len(a), len(b))
	}
	select {
	case err := <-rs[2].done:
		t.Fatalf("node 3's driver stopped: %v", err)
	case err := <-rs[0].done:
		t.Fatalf("the leader's driver stopped: %v", err)
	default:
	}
}

// A leader compacts by bytes too (LogCompactBytes), long before LogCompactEvery entries
// when the entries are large: a busy group's raft log then dies in Pebble's memtable
// instead of being flushed (BenchmarkProposeBigEntries).
func TestDriverLogCompactionByBytes(t *testing.T) {
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	peers := []uint64{1, 2, 3}
	tune := func(c *Config) { c.LogCompaction, c.LogCompactEvery, c.LogCompactBytes = true, 1000, 32<<10 }
	var rs []*testReplica
	for _, id := range peers {
		rs = append(rs, startReplicaWith(t, net, id, vfs.NewMem(), []uint64{7}, peers, tune))
	}
	l := leaderOf(t, rs, 7)
	big := make([]byte, 8<<10)
	for i := range 12 { // 96 KiB in 12 entries, far fewer than LogCompactEvery
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := l.d.Propose(ctx, 7, big)
		cancel()
		if err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to compact its log by bytes", r.id), func() bool { f, _ := logBounds(t, r, 7); return f > 1 })
	}
}
