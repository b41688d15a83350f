package replica

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func ent(index, term uint64, data string) *pb.Entry {
	e := &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryNormal.Enum()}
	if data != "" {
		e.Data = []byte(data)
	}
	return e
}

func ents(from, to, term uint64) []*pb.Entry {
	var es []*pb.Entry
	for i := from; i <= to; i++ {
		es = append(es, ent(i, term, fmt.Sprintf("e%d.%d", i, term)))
	}
	return es
}

// storageOp is one operation applied to both storages.
type storageOp struct {
	name string
	do   func(s anyStorage) error
}

func opAppend(es []*pb.Entry) storageOp {
	return storageOp{fmt.Sprintf("append %d entries from %d", len(es), es[0].GetIndex()), func(s anyStorage) error {
		return s.Append(es)
	}}
}

// compareStorages asks both storages every question raft may ask and fails
// on the first different answer.
func compareStorages(t *testing.T, step string, want *raft.MemoryStorage, got *Storage) {
	t.Helper()
	wf, _ := want.FirstIndex()
	wl, _ := want.LastIndex()
	gf, _ := got.FirstIndex()
	gl, _ := got.LastIndex()
	if wf != gf || wl != gl {
		t.Fatalf("%s: first/last index = %d/%d, MemoryStorage says %d/%d", step, gf, gl, wf, wl)
	}
	whs, wcs, _ := want.InitialState()
	ghs, gcs, _ := got.InitialState()
	if !proto.Equal(pb.EnsureConfState(wcs), gcs) || (whs != nil || ghs != nil) && !proto.Equal(whs, ghs) {
		t.Fatalf("%s: initial state = %v %v, MemoryStorage says %v %v", step, ghs, gcs, whs, wcs)
	}
	wsn, _ := want.Snapshot()
	gsn, _ := got.Snapshot()
	if !proto.Equal(wsn, gsn) {
		t.Fatalf("%s: snapshot = %v, MemoryStorage says %v", step, gsn, wsn)
	}
	lowest := uint64(0)
	if wf > 2 {
		lowest = wf - 2
	}
	for i := lowest; i <= wl+1; i++ {
		wt, werr := want.Term(i)
		gt, gerr := got.Term(i)
		if wt != gt || !errors.Is(gerr, werr) && (werr != nil || gerr != nil) {
			t.Fatalf("%s: Term(%d) = %d, %v; MemoryStorage says %d, %v", step, i, gt, gerr, wt, werr)
		}
	}
	for lo := lowest; lo <= wl+1; lo++ {
		for hi := lo + 1; hi <= wl+1; hi++ {
			for _, max := range []uint64{0, 20, 45, 100, 1 << 30} {
				we, werr := want.Entries(lo, hi, max)
				ge, gerr := got.Entries(lo, hi, max)
				if !errors.Is(gerr, werr) && (werr != nil || gerr != nil) {
					t.Fatalf("%s: Entries(%d, %d, %d) error %v; MemoryStorage says %v", step, lo, hi, max, gerr, werr)
				}
				if len(we) != len(ge) {
					t.Fatalf("%s: Entries(%d, %d, %d) = %d entries; MemoryStorage says %d", step, lo, hi, max, len(ge), len(we))
				}
				for i := range we {
					if !proto.Equal(we[i], ge[i]) {
						t.Fatalf("%s: Entries(%d, %d, %d)[%d] = %v; MemoryStorage says %v", step, lo, hi, max, i, ge[i], we[i])
					}
				}
			}
		}
	}
}

// runOps applies ops to a MemoryStorage and to a Storage, comparing answers
// after every step and once more after reopening the Storage from Pebble:
// without an entry cache, with one of a few entries (answers from the cache,
// from Pebble and across both, trimmed often) and with one that holds all.
func runOps(t *testing.T, ops []storageOp) {
	t.Helper()
	for _, cache := range []uint64{0, 40, 1 << 20} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) { runOpsCached(t, ops, cache) })
	}
}

func runOpsCached(t *testing.T, ops []storageOp, cache uint64) {
	t.Helper()
	db := openTestDB(t, nil)
	st := NewStore(db)
	got, err := st.GroupCached(7, cache)
	if err != nil {
		t.Fatal(err)
	}
	other, err := st.Group(8) // a neighbour group that must stay untouched
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Append(ents(1, 3, 9)); err != nil {
		t.Fatal(err)
	}
	want := raft.NewMemoryStorage()
	for i, op := range ops {
		werr := op.do(want)
		gerr := op.do(got)
		if !errors.Is(gerr, werr) && (werr != nil || gerr != nil) {
			t.Fatalf("step %d %s: error %v; MemoryStorage says %v", i, op.name, gerr, werr)
		}
		compareStorages(t, fmt.Sprintf("step %d %s", i, op.name), want, got)
	}
	reopened, err := st.Group(7)
	if err != nil {
		t.Fatal(err)
	}
	compareStorages(t, "after reopen", want, reopened)
	if l, _ := other.LastIndex(); l != 3 {
		t.Fatalf("neighbour group's last index = %d, want 3", l)
	}
	if es, err := other.Entries(1, 4, 1<<20); err != nil || len(es) != 3 || es[2].GetTerm() != 9 {
		t.Fatalf("neighbour group's entries = %v, %v", es, err)
	}
}

// anyStorage is what raft.MemoryStorage and Storage both offer for writing.
type anyStorage = interface {
	Append([]*pb.Entry) error
	SetHardState(*pb.HardState) error
	ApplySnapshot(*pb.Snapshot) error
	Compact(uint64) error
}

func opHS(term, vote, commit uint64) storageOp {
	return storageOp{fmt.Sprintf("hardstate %d/%d/%d", term, vote, commit), func(s anyStorage) error {
		return s.SetHardState(&pb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)})
	}}
}

func opSnap(index, term uint64, voters ...uint64) storageOp {
	return storageOp{fmt.Sprintf("snapshot %d/%d", index, term), func(s anyStorage) error {
		return s.ApplySnapshot(&pb.Snapshot{Data: []byte("snap"), Metadata: &pb.SnapshotMetadata{
			Index: new(index), Term: new(term), ConfState: &pb.ConfState{Voters: voters},
		}})
	}}
}

func opCompact(i uint64) storageOp {
	return storageOp{fmt.Sprintf("compact %d", i), func(s anyStorage) error { return s.Compact(i) }}
}

func TestStorageMatchesMemoryStorage(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []storageOp
	}{
		{"empty", nil},
		{"append", []storageOp{opAppend(ents(1, 5, 1))}},
		{"append in pieces", []storageOp{opAppend(ents(1, 2, 1)), opAppend(ents(3, 6, 1)), opAppend(ents(7, 7, 2))}},
		{"conflicting suffix truncated", []storageOp{opAppend(ents(1, 8, 1)), opAppend(ents(4, 5, 2))}},
		{"overwrite in the middle", []storageOp{opAppend(ents(1, 8, 1)), opAppend(ents(3, 9, 3))}},
		{"hardstate", []storageOp{opAppend(ents(1, 3, 1)), opHS(2, 3, 2), opHS(3, 0, 3)}},
		{"compact", []storageOp{opAppend(ents(1, 8, 1)), opCompact(3), opCompact(3), opCompact(2), opAppend(ents(2, 9, 2))}},
		{"compact all", []storageOp{opAppend(ents(1, 4, 1)), opCompact(4), opAppend(ents(5, 6, 2))}},
		{"bootstrap snapshot", []storageOp{opSnap(0, 0, 1, 2, 3), opAppend(ents(1, 3, 1))}},
		{"snapshot", []storageOp{opAppend(ents(1, 5, 1)), opSnap(10, 3, 1, 2), opAppend(ents(11, 12, 3)), opSnap(8, 2, 1), opSnap(10, 3, 1)}},
		{"append behind a snapshot", []storageOp{opSnap(10, 3, 1), opAppend(ents(5, 12, 3))}},
	} {
		t.Run(tc.name, func(t *testing.T) { runOps(t, tc.ops) })
	}
}

func TestStorageRandomizedAgainstMemoryStorage(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			var (
				ops         []storageOp
				first, last uint64 = 1, 0
				term        uint64 = 1
				snapIdx     uint64
			)
			for range 25 {
				switch r := rng.IntN(10); {
				case r < 6: // append at or before last+1, possibly conflicting
					from := last + 1
					if last >= first && rng.IntN(2) == 0 {
						from = first + rng.Uint64N(last-first+1)
					}
					if rng.IntN(3) == 0 {
						term++
					}
					to := from + rng.Uint64N(4)
					ops = append(ops, opAppend(ents(from, to, term)))
					last = to
				case r < 7:
					ops = append(ops, opHS(term, rng.Uint64N(4), rng.Uint64N(last+1)))
				case r < 9:
					if last == 0 {
						continue
					}
					i := rng.Uint64N(last + 1) // may be <= first-1: ErrCompacted
					if i == 0 {
						i = 1
					}
					ops = append(ops, opCompact(i))
					if i >= first {
						first = i + 1
					}
				default:
					idx := snapIdx + rng.Uint64N(8) // may be out of date
					ops = append(ops, opSnap(idx, term, 1, 2, 3))
					if idx > snapIdx || snapIdx == 0 {
						snapIdx, first, last = idx, idx+1, idx
					}
				}
			}
			runOps(t, ops)
		})
	}
}

func TestStorageCrashKeepsOnlySynced(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db := openTestDB(t, fs)
	s, err := NewStore(db).Group(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ents(1, 50, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ents(40, 45, 2)); err != nil { // synced truncation
		t.Fatal(err)
	}
	if err := s.SetHardState(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(3)), Commit: new(uint64(41))}); err != nil {
		t.Fatal(err)
	}
	// An append and a HardState written but not synced, as if the process
	// died between the write and the fsync.
	b := db.NewBatch()
	after, err := s.stageAppend(b, ents(46, 60, 2))
	if err != nil {
		t.Fatal(err)
	}
	hsAfter, err := s.stageHardState(b, &pb.HardState{Term: new(uint64(3)), Vote: new(uint64(1)), Commit: new(uint64(60))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.LastIndex(); l != 45 {
		t.Fatalf("before the update runs, last index = %d, want 45: an unsynced write was reported", l)
	}
	after()
	hsAfter()
	if l, _ := s.LastIndex(); l != 60 {
		t.Fatalf("after the update, last index = %d, want 60", l)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	db2 := openTestDB(t, crashed)
	s2, err := NewStore(db2).Group(1)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := s2.LastIndex(); l != 45 {
		t.Fatalf("after the crash, last index = %d, want 45", l)
	}
	hs, _, _ := s2.InitialState()
	if hs.GetTerm() != 2 || hs.GetVote() != 3 || hs.GetCommit() != 41 {
		t.Fatalf("after the crash, hard state = %v, want the synced 2/3/41", hs)
	}
	es, err := s2.Entries(1, 46, 1<<30)
	if err != nil || len(es) != 45 {
		t.Fatalf("entries after the crash: %d, %v", len(es), err)
	}
	for _, e := range es {
		want := uint64(1)
		if e.GetIndex() >= 40 {
			want = 2
		}
		if e.GetTerm() != want || string(e.GetData()) != fmt.Sprintf("e%d.%d", e.GetIndex(), want) {
			t.Fatalf("entry %d after the crash = %v", e.GetIndex(), e)
		}
	}
}

func TestStorageRefusesHoleAndReportsCorruption(t *testing.T) {
	db := openTestDB(t, nil)
	s, err := NewStore(db).Group(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ents(1, 3, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ents(5, 6, 1)); err == nil {
		t.Fatal("append leaving a hole was accepted")
	}
	k := indexKey(prefixRaft, kindEntry, 1, 2)
	v, closer, err := db.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), v...)
	closer.Close()
	bad[len(bad)-1] ^= 0xff
	if err := db.Set(k, bad, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Entries(1, 4, 1<<20); !errors.Is(err, errCorrupt) {
		t.Fatalf("entries over a damaged value: %v, want errCorrupt", err)
	}
}
