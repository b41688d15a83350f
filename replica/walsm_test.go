package replica

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// walReplica is one node of a region whose replicated topics live in its
// own wal.Log (on disk, in t.TempDir()), the raft state in the same Pebble.
type walReplica struct {
	id     uint64
	dir    string
	log    *wal.Log
	sm     *WalSM
	d      *Driver
	cancel context.CancelFunc
	done   chan error
}

func startWalReplica(t testing.TB, net *testNet, id uint64, dir string, groups, peers []uint64) *walReplica {
	t.Helper()
	return startWalReplicaWith(t, net, id, dir, groups, peers, nil)
}

// startWalReplicaWith is startWalReplica with tune (if not nil) changing the
// driver's configuration.
func startWalReplicaWith(t testing.TB, net *testNet, id uint64, dir string, groups, peers []uint64, tune func(*Config)) *walReplica {
	t.Helper()
	return startWalReplicaSM(t, net, id, dir, groups, peers, nil, tune)
}

// startWalReplicaSM is startWalReplicaWith with groupOf mapping topics to groups (nil:
// WalSMConfig's default, a group per topic).
func startWalReplicaSM(t testing.TB, net *testNet, id uint64, dir string, groups, peers []uint64, groupOf func(string) uint64, tune func(*Config)) *walReplica {
	t.Helper()
	l, err := wal.Open(dir, wal.Options{RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := NewWalSM(WalSMConfig{Log: l, GroupOf: groupOf})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		NodeID: id, DB: l.DB(), StateMachine: sm, Transport: netTransport{id, net},
		TickInterval: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
	}
	if tune != nil {
		tune(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &walReplica{id: id, dir: dir, log: l, sm: sm, d: d, done: make(chan error, 1)}
	r.cancel = runDriver(t, net, id, d, groups, peers, r.done)
	t.Cleanup(func() { r.stop(t, net) })
	return r
}

// stop stops the driver, then closes the log (the driver uses its DB).
func (r *walReplica) stop(t testing.TB, net *testNet) {
	if !haltDriver(t, net, r.id, &r.cancel, r.done) {
		return
	}
	if err := r.log.Close(); err != nil {
		t.Errorf("node %d: close wal: %v", r.id, err)
	}
}

func startWalRegion(t testing.TB, groups []uint64) ([]*walReplica, *testNet, []uint64) {
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	peers := []uint64{1, 2, 3}
	var rs []*walReplica
	for _, id := range peers {
		rs = append(rs, startWalReplica(t, net, id, t.TempDir(), groups, peers))
	}
	return rs, net, peers
}

func (r *walReplica) running() *Driver {
	if r.cancel == nil {
		return nil
	}
	return r.d
}

// proposeWal proposes e at the current leader, again while the proposal is
// refused or dropped by a leader change (a dropped one never commits).
func proposeWal(t *testing.T, rs []*walReplica, e *WalEntry) wal.AppendResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		l := leaderOf(t, rs, rs[0].sm.Group(e.Topic))
		res := l.sm.Propose(ctx, l.d, e)
		if !errors.Is(res.Err, ErrNotLeader) && !errors.Is(res.Err, ErrDropped) || ctx.Err() != nil {
			return res
		}
	}
}

// readAll reads the topic from every running replica once it has applied
// next records, and checks that all of them serve the same records.
func readAll(t *testing.T, rs []*walReplica, topic string, next uint64) []wal.Record {
	t.Helper()
	var want []wal.Record
	for _, r := range rs {
		if r.cancel == nil {
			continue
		}
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to serve %d records of %q", r.id, next, topic), func() bool {
			_, n, _ := r.log.Bounds(topic)
			return n >= next
		})
		recs, err := r.log.Read(topic, 0, 0, 0)
		if err != nil {
			t.Fatalf("node %d: read %q: %v", r.id, topic, err)
		}
		if uint64(len(recs)) != next {
			t.Fatalf("node %d serves %d records of %q, want %d", r.id, len(recs), topic, next)
		}
		for i, rec := range recs {
			if rec.Offset != uint64(i) || i > 0 && rec.Time < recs[i-1].Time {
				t.Fatalf("node %d: record %d: offset %d, time %d after %d", r.id, i, rec.Offset, rec.Time, recs[max(i-1, 0)].Time)
			}
		}
		if want == nil {
			want = recs
		} else if !reflect.DeepEqual(recs, want) {
			t.Fatalf("node %d serves other records than node %d:\n%+v\n%+v", r.id, rs[0].id, recs, want)
		}
	}
	return want
}

func TestWalSMReplicatedTopic(t *testing.T) {
	const topic = "orders.eu"
	g := TopicGroup(topic)
	rs, net, peers := startWalRegion(t, []uint64{g})

	// Every replica's Notify watchers wake when applied records become
	// readable there.
	woken := make([]chan struct{}, len(rs))
	for i, r := range rs {
		woken[i] = make(chan struct{}, 1)
		defer r.log.Notify(topic, woken[i])()
	}

	// Appends from the leader, some with a producer: served at the same
	// offsets, byte for byte, by every replica's wal.
	var want uint64
	for i := range 10 {
		recs := []wal.Record{
			{Payload: fmt.Appendf(nil, "plain-%d", i), Headers: []wal.Header{{Key: "i", Value: fmt.Append(nil, i)}}},
			{Payload: fmt.Appendf(nil, "keyed-%d", i), ProducerID: "prod", Sequence: uint64(i + 1)},
		}
		res := proposeWal(t, rs, &WalEntry{Kind: EntryAppend, Topic: topic, Records: recs})
		if res.Err != nil || res.First != want || res.Count != 2 || res.Skipped != nil {
			t.Fatalf("append %d: %+v, want first %d", i, res, want)
		}
		want += 2
	}
	readAll(t, rs, topic, want)
	for i, r := range rs {
		select {
		case <-woken[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("node %d serves the records but did not wake its watchers", r.id)
		}
	}

	// Every replica refuses a local append to the topic.
	for _, r := range rs {
		err := r.log.Append(context.Background(), wal.AppendRequest{Topic: topic, Records: []wal.Record{{Payload: []byte("x")}}}).Err
		if !errors.Is(err, wal.ErrReplicated) {
			t.Fatalf("node %d: local append to a replicated topic: %v", r.id, err)
		}
	}

	// A retry of (prod, 3) after a leader change gets its original offset
	// on every replica and is stored once.
	old := leaderOf(t, rs, g)
	old.stop(t, net)
	dup := proposeWal(t, rs, &WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{
		{Payload: []byte("keyed-2"), ProducerID: "prod", Sequence: 3},
		{Payload: []byte("new"), ProducerID: "prod", Sequence: 11},
	}})
	if dup.Err != nil || len(dup.Skipped) != 1 || dup.Skipped[0].Offset != 5 || dup.Skipped[0].Err != nil || dup.Count != 1 || dup.First != want {
		t.Fatalf("retry after a leader change: %+v, want (prod, 3) skipped at its original offset 5", dup)
	}
	if nl := leaderOf(t, rs, g); nl == old {
		t.Fatal("the stopped node still leads")
	}
	want++
	i := slices.Index(rs, old)
	rs[i] = startWalReplica(t, net, old.id, old.dir, []uint64{g}, peers)
	recs := readAll(t, rs, topic, want)
	if recs[want-1].Sequence != 11 {
		t.Fatalf("last record %+v", recs[want-1])
	}

	// Mirror appends compare and advance their cursor in one entry: a stale
	// link's repeat is a no-op.
	m := &WalEntry{Kind: EntryMirrorAppend, Topic: topic, Region: "us", Name: "mirror/us", Value: 1,
		Records: []wal.Record{{OriginOffset: 0, Payload: []byte("us0")}, {OriginOffset: 1, Payload: []byte("us1")}}}
	if res := proposeWal(t, rs, m); res.Err != nil || res.First != want || res.Count != 2 {
		t.Fatalf("mirror append: %+v", res)
	}
	want += 2
	res := proposeWal(t, rs, m)
	var cme *CursorMismatchError
	if !errors.As(res.Err, &cme) || !cme.HasStored || cme.Stored != 1 || res.Count != 0 {
		t.Fatalf("stale mirror append: %+v, want a cursor mismatch naming the stored cursor 1", res)
	}
	m2 := &WalEntry{Kind: EntryMirrorAppend, Topic: topic, Region: "us", Name: "mirror/us", HasExpected: true, Expected: 1, Value: 2,
		Records: []wal.Record{{OriginOffset: 2, Payload: []byte("us2")}}}
	if res := proposeWal(t, rs, m2); res.Err != nil || res.First != want {
		t.Fatalf("next mirror append: %+v", res)
	}
	want++
	recs = readAll(t, rs, topic, want)
	if r := recs[want-1]; r.OriginRegion != "us" || r.OriginOffset != 2 || string(r.Payload) != "us2" {
		t.Fatalf("mirrored record %+v", r)
	}

	// Positions are replicated.
	if res := proposeWal(t, rs, &WalEntry{Kind: EntrySetPosition, Topic: topic, Name: "tenant/a/d1", Value: 7}); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to store the position", r.id), func() bool {
			v, ok, _ := r.log.Position("tenant/a/d1", topic)
			return ok && v == 7
		})
		if v, ok, _ := r.log.Position("mirror/us", topic); !ok || v != 2 {
			t.Fatalf("node %d: mirror cursor %d %v", r.id, v, ok)
		}
	}

	// A restarted replica resumes with the same state, and applying its
	// already applied entries again changes nothing.
	f := rs[(i+1)%3]
	f.stop(t, net)
	rs[(i+1)%3] = startWalReplica(t, net, f.id, f.dir, []uint64{g}, peers)
	f = rs[(i+1)%3]
	if !reflect.DeepEqual(readAll(t, rs, topic, want), recs) {
		t.Fatal("a restarted replica serves other records")
	}
	if v, ok, _ := f.log.Position("tenant/a/d1", topic); !ok || v != 7 {
		t.Fatalf("restarted node: position %d %v", v, ok)
	}
	reapplyChangesNothing(t, f, g)
	if res := proposeWal(t, rs, &WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{{ProducerID: "prod", Sequence: 11}}}); res.Err != nil || len(res.Skipped) != 1 || res.Skipped[0].Offset != 20 {
		t.Fatalf("duplicate after restarts: %+v, want the original offset 20", res)
	}
	checkSharedKeySpaces(t, f)
}

// reapplyChangesNothing hands the replica's state machine its group's
// applied entries again, as raft may after a restart: nothing is written.
func reapplyChangesNothing(t *testing.T, r *walReplica, g uint64) {
	t.Helper()
	var applied uint64
	if err := r.d.exec(context.Background(), func(e *engine) {
		applied = e.groups[g].rn.BasicStatus().Applied
		st := e.groups[g].st
		pents, err := st.Entries(1, applied+1, 1<<30)
		if err != nil {
			t.Error(err)
			return
		}
		var ents []Entry
		for _, pe := range pents {
			if env, err := decodeEnvelope(pe.GetData()); err == nil {
				ents = append(ents, Entry{Index: pe.GetIndex(), Time: env.time, Data: env.data})
			}
		}
		b := r.log.DB().NewBatch()
		defer b.Close()
		res, err := r.sm.Apply(b, g, applied, ents)
		if err != nil || len(res) != 0 || !b.Empty() || len(ents) == 0 {
			t.Errorf("re-applying %d entries up to %d: %d results, batch empty %v, %v", len(ents), applied, len(res), b.Empty(), err)
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// checkSharedKeySpaces checks that every key of the shared DB belongs to
// exactly one of wal and replica, and that both wrote some.
func checkSharedKeySpaces(t *testing.T, r *walReplica) {
	t.Helper()
	it, err := r.log.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var walKeys, replicaKeys int
	for ok := it.First(); ok; ok = it.Next() {
		c := it.Key()[0]
		inWal, inReplica := slices.Contains(wal.KeyPrefixes(), c), c == prefixRaft || c == prefixLog
		switch {
		case inWal && inReplica:
			t.Fatalf("key %q is in both key spaces", it.Key())
		case inWal:
			walKeys++
		case inReplica:
			replicaKeys++
		default:
			t.Fatalf("key %q belongs to neither wal nor replica", it.Key())
		}
	}
	if walKeys == 0 || replicaKeys == 0 {
		t.Fatalf("wal wrote %d keys, replica %d: both must", walKeys, replicaKeys)
	}
}

func TestWalSMServesNothingUncommitted(t *testing.T) {
	const topic = "t"
	g := TopicGroup(topic)
	rs, net, _ := startWalRegion(t, []uint64{g})
	proposeWal(t, rs, &WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{{Payload: []byte("0")}}})
	readAll(t, rs, topic, 1)

	// Cut the leader off: its next entry is appended (and synced) to its
	// own raft log but cannot commit, so its wal must not serve it.
	l := leaderOf(t, rs, g)
	net.mu.Lock()
	for _, r := range rs {
		if r != l {
			net.down[r.id] = true
		}
	}
	net.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan wal.AppendResult, 1)
	go func() {
		got <- l.sm.Propose(ctx, l.d, &WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{{Payload: []byte("1")}}})
	}()
	testlog.WaitFor(t, 20*time.Second, "the uncommitted entry in the leader's raft log", func() bool {
		st, err := NewStore(l.log.DB()).Group(g)
		if err != nil {
			return false
		}
		last, _ := st.LastIndex()
		hs, _, _ := st.InitialState()
		return last > hs.GetCommit()
	})
	// A call into the driver runs after the round that wrote the entry
	// (and would have applied it) has ended.
	if _, err := l.d.Status(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, next, _ := l.log.Bounds(topic); next != 1 {
		t.Fatalf("the cut-off leader serves %d records, only 1 is committed", next)
	}
	select {
	case res := <-got:
		if res.Err == nil {
			t.Fatalf("a proposal without a quorum was answered: %+v", res)
		}
	default:
	}
	net.mu.Lock()
	for _, r := range rs {
		delete(net.down, r.id)
	}
	net.mu.Unlock()
	// Once healed, the entry is either committed (and served everywhere) or
	// dropped by the new leader (and served nowhere).
	res := <-got
	switch {
	case res.Err == nil:
		readAll(t, rs, topic, 2)
	case errors.Is(res.Err, ErrDropped):
		proposeWal(t, rs, &WalEntry{Kind: EntryAppend, Topic: topic, Records: []wal.Record{{Payload: []byte("2")}}})
		if recs := readAll(t, rs, topic, 2); string(recs[1].Payload) != "2" {
			t.Fatalf("a dropped entry is served: %+v", recs)
		}
	default:
		t.Fatal(res.Err)
	}
}
