package wal

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestAdminCrash deletes or purges a topic while another topic is appended
// to, takes crash clones of the store (vfs.NewCrashableMem) before, while and
// after the operation, including at the moments the committer applies a
// batch, and checks every clone: the operation is wholly there or not at all
// (records, first offset, configuration, positions, no key of a deleted
// topic's ID left), wholly there once it returned, the store opens (the close
// marker of the earlier clean close does not take the deleted topic for lost
// records) and verifies, the other topic keeps every acknowledged record, and
// the victim's offsets go on (purge) or restart at 0 with a new ID (delete).
func TestAdminCrash(t *testing.T) {
	sessions := 16
	if testing.Short() {
		sessions = 6
	}
	seed := crashTestSeed()
	t.Logf("seed %d (rerun with -wal.crashseed=%d)", seed, seed)
	var before, after int
	for s := range sessions {
		op := opPurge
		if s%2 == 0 {
			op = opDelete
		}
		b, a := runAdminCrash(t, seed+uint64(s), op)
		before, after = before+b, after+a
		if t.Failed() {
			t.Fatalf("session %d (seed %d, %s) failed", s, seed+uint64(s), op)
		}
	}
	t.Logf("clones with the operation not (yet) there: %d, wholly there: %d", before, after)
	if before == 0 || after == 0 {
		t.Fatal("the crash test did not see both outcomes")
	}
}

type adminClone struct {
	fs       *vfs.MemFS
	returned bool // the operation had returned when the clone was taken
	byAcked  uint64
}

func runAdminCrash(t *testing.T, seed uint64, op adminKind) (notThere, there int) {
	rng := rand.New(rand.NewPCG(seed, 0xad))
	fs := vfs.NewCrashableMem()
	var armed atomic.Int32
	var mu sync.Mutex
	var clones []adminClone
	var opReturned atomic.Bool
	var byAcked atomic.Uint64
	crng := rand.New(rand.NewPCG(seed, 0xc1)) // clone's own: it runs on the committer too (under mu)
	clone := func() {
		c := adminClone{returned: opReturned.Load(), byAcked: byAcked.Load()}
		pct := []int{0, 20, 50, 80, 100}[crng.IntN(5)]
		c.fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, uint64(len(clones))))})
		clones = append(clones, c)
	}
	// At the operation's apply, with fsyncs held back: its batch is in
	// Pebble's WAL and not synced, and each clone keeps a random share of
	// the unsynced data.
	gate := &syncGate{}
	hooks := &testHooks{adminApply: func(apply func()) {
		gate.hold()
		apply()
		for range armed.Load() {
			mu.Lock()
			clone()
			mu.Unlock()
		}
		gate.release()
	}}
	opts := Options{FS: gatedFS{crashFS{fs}, gate}, Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1,
		MaxBatchRecords: 16, MemTableSize: 256 << 10, CacheSize: 1 << 20, MaxBatchBytes: 64 << 10}
	l, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	k := 20 + rng.IntN(200)
	for i := 0; i < k; i += 10 {
		mustAppend(t, l, "victim", i, min(10, k-i))
	}
	mustAppend(t, l, "by", 0, 1)
	byAcked.Store(1)
	mustSetRetention(t, l, "victim", Retention{MaxBytes: 1 << 30})
	if err := l.SetPosition(t.Context(), Position{Name: "c", Topic: "victim", Value: uint64(k - 1)}); err != nil {
		t.Fatal(err)
	}
	// A consumer group with state on both topics: the victim's goes with the operation.
	if err := l.SetGroup(t.Context(), "grp", &GroupSettings{Pattern: ">"}, map[string]*GroupState{
		"victim": {Floor: 2, Next: 5, Entries: []GroupEntry{{Offset: 3, Deliveries: 1}}},
		"by":     {Floor: 0, Next: 1},
	}); err != nil {
		t.Fatal(err)
	}
	oldID := topicID(t, l, "victim")
	// A clean close leaves the victim in the close marker.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	opts.testHooks = hooks
	if l, err = Open("db", opts); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the bystander's writer
		defer wg.Done()
		for i := 1; !stop.Load(); i++ {
			res := l.Append(context.Background(), AppendRequest{Topic: "by", Records: []Record{{Payload: testPayload("by", i)}}})
			if res.Err != nil {
				t.Errorf("append by: %v", res.Err)
				return
			}
			byAcked.Store(res.First + 1)
		}
	}()
	waitForNext(t, l, "by", 5)
	mu.Lock()
	clone() // before
	mu.Unlock()
	armed.Store(int32(1 + rng.IntN(3)))
	errc := make(chan error, 1)
	go func() {
		var err error
		if op == opDelete {
			_, err = l.DeleteTopic(context.Background(), "victim")
		} else {
			_, err = l.PurgeTopic(context.Background(), "victim")
		}
		opReturned.Store(true)
		errc <- err
	}()
	for range 1 + rng.IntN(3) {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond) // the seeded crash schedule: when to clone is the test
		mu.Lock()
		clone()
		mu.Unlock()
	}
	if err := <-errc; err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	mu.Lock()
	clone() // after
	mu.Unlock()
	stop.Store(true)
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range clones {
		applied := checkAdminClone(t, fmt.Sprintf("seed %d %s clone %d", seed, op, i), c, op, uint64(k), oldID)
		if applied {
			there++
		} else {
			notThere++
		}
		if t.Failed() {
			return
		}
	}
	return notThere, there
}

// checkAdminClone opens a clone and checks it; it reports whether the
// operation is there.
func checkAdminClone(t *testing.T, name string, c adminClone, op adminKind, k uint64, oldID uint32) bool {
	t.Helper()
	l, err := Open("db", Options{FS: crashFS{c.fs}, Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1,
		MemTableSize: 256 << 10, CacheSize: 1 << 20, MaxBatchBytes: 64 << 10})
	if err != nil {
		t.Errorf("%s: reopen: %v", name, err)
		return false
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
	}()
	if _, err := l.Verify(t.Context()); err != nil {
		t.Errorf("%s: verify: %v", name, err)
	}
	if first, next, ok := l.Bounds("by"); !ok || first != 0 || next < c.byAcked {
		t.Errorf("%s: bystander bounds %d %d %v, %d acknowledged", name, first, next, ok, c.byAcked)
	} else if recs := mustReadAll(t, l, "by", 0); uint64(len(recs)) != next || string(recs[next-1].Payload) != string(testPayload("by", int(next-1))) {
		t.Errorf("%s: bystander reads %d records of %d", name, len(recs), next)
	}
	first, next, exists := l.Bounds("victim")
	pos, hasPos, _ := l.Position("c", "victim")
	cfg, hasCfg := l.TopicConfig("victim")
	_, groups, _, err := l.Group("grp")
	if err != nil || groups["by"] == nil {
		t.Errorf("%s: the bystander's group state: %+v %v", name, groups, err)
	}
	gs := groups["victim"]
	whole := exists && first == 0 && next == k && hasPos && pos == k-1 && hasCfg && cfg.RetentionSet &&
		gs != nil && gs.Floor == 2 && len(gs.Entries) == 1
	if whole {
		if recs := mustReadAll(t, l, "victim", 0); uint64(len(recs)) != k {
			t.Errorf("%s: victim before the %s reads %d of %d records", name, op, len(recs), k)
		}
	}
	var applied bool
	switch op {
	case opDelete:
		applied = !exists && !hasPos && !hasCfg && keysOfID(t, l, oldID) == 0 && gs == nil &&
			rawKeys(t, l, positionTopicPrefix("victim"), prefixEnd(positionTopicPrefix("victim"))) == 0
	case opPurge:
		applied = exists && first == k && next == k && hasPos && pos == k-1 && hasCfg && cfg.RetentionSet &&
			gs != nil && gs.Floor == k && gs.Next == k && len(gs.Entries) == 0 &&
			rawKeys(t, l, recordKey(oldID, 0), recordKey(oldID, k)) == 0
	}
	switch {
	case whole == applied:
		t.Errorf("%s: the %s is partly there: exists %v bounds %d %d, position %d %v, config %+v %v, %d keys of the old ID, group state %+v",
			name, op, exists, first, next, pos, hasPos, cfg, hasCfg, keysOfID(t, l, oldID), gs)
		return false
	case c.returned && !applied:
		t.Errorf("%s: the %s returned, but the clone does not have it", name, op)
	}
	// The log goes on: at the next offset after a purge, at 0 with a new ID after a delete.
	res := l.Append(t.Context(), AppendRequest{Topic: "victim", Records: []Record{{Payload: []byte("after")}}})
	wantFirst := k
	if op == opDelete && applied {
		wantFirst = 0
	}
	if res.Err != nil || res.First != wantFirst {
		t.Errorf("%s: append after the %s (applied %v): %+v, want offset %d", name, op, applied, res, wantFirst)
	}
	if op == opDelete && applied {
		if id := topicID(t, l, "victim"); id <= oldID {
			t.Errorf("%s: recreated topic got ID %d, the deleted one had %d", name, id, oldID)
		}
	}
	return applied
}

// syncGate holds back file syncs while held.
type syncGate struct {
	mu   sync.Mutex
	held chan struct{} // closed by release; nil when not held
}

func (g *syncGate) hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

func (g *syncGate) release() {
	g.mu.Lock()
	close(g.held)
	g.held = nil
	g.mu.Unlock()
}

func (g *syncGate) wait() {
	g.mu.Lock()
	ch := g.held
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// gatedFS is crashFS whose files' syncs wait while its gate is held.
type gatedFS struct {
	crashFS
	gate *syncGate
}

func (fs gatedFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.crashFS.Create(name, category)
	if err != nil {
		return nil, err
	}
	return gatedFile{f, fs.gate}, nil
}

func (fs gatedFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.crashFS.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return nil, err
	}
	return gatedFile{f, fs.gate}, nil
}

type gatedFile struct {
	vfs.File
	gate *syncGate
}

func (f gatedFile) Sync() error     { f.gate.wait(); return f.File.Sync() }
func (f gatedFile) SyncData() error { f.gate.wait(); return f.File.SyncData() }
func (f gatedFile) SyncTo(n int64) (bool, error) {
	f.gate.wait()
	return f.File.SyncTo(n)
}
