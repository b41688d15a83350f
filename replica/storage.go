package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Store is the raft storage of all the groups of one node, in one Pebble DB
// that it shares with the rest of the node (it does not own or close it).
type Store struct {
	db *pebble.DB
}

// NewStore returns the raft storage kept in db under the 'R' key space.
func NewStore(db *pebble.DB) *Store { return &Store{db: db} }

// Storage is one group's raft log, HardState, ConfState and snapshot. It
// implements raft.Storage. Reads are answered from what has been committed to
// Pebble by the synced batches of Append, SetHardState, ApplySnapshot and
// Compact (or the driver's per-round batch), never from a batch in flight.
//
// The mutex guards the small in-memory summary; the driver's goroutine is the
// only writer, and tests or observers may read concurrently.
type Storage struct {
	db    *pebble.DB
	group uint64
	// build makes a snapshot of the group's state at its applied index, for
	// a follower that needs entries compacted away (the driver's groups; nil:
	// only the last snapshot applied is served). Set before the group runs.
	build func() (*pb.Snapshot, error)

	mu struct {
		sync.Mutex
		hs         *pb.HardState // nil until one is stored
		cs         *pb.ConfState
		snap       *pb.Snapshot
		built      *pb.Snapshot // the last one build made
		truncIndex uint64       // index of the entry before the first available one
		truncTerm  uint64
		last       uint64
		cache      entryCache // the newest durable entries
	}
}

// Group opens the storage of one group, reading its state back from Pebble,
// with no entry cache (see GroupCached).
func (s *Store) Group(group uint64) (*Storage, error) { return s.GroupCached(group, 0) }

// GroupCached is Group with an in-memory copy of the group's newest durable
// entries of up to cacheBytes (encoded size), from which Entries and Term
// answer without reading Pebble: a leader reads its entries back when they
// commit and when it sends them to a follower.
func (s *Store) GroupCached(group uint64, cacheBytes uint64) (*Storage, error) {
	g := &Storage{db: s.db, group: group}
	g.mu.cache.max = cacheBytes
	if err := g.load(); err != nil {
		return nil, fmt.Errorf("replica: open group %d storage: %w", group, err)
	}
	return g, nil
}

func (s *Storage) load() error {
	s.mu.cs = pb.EnsureConfState(nil)
	s.mu.snap = pb.EnsureSnapshot(nil)
	hs := &pb.HardState{}
	ok, err := s.getProto(groupKey(prefixRaft, kindHardState, s.group), hs)
	if err != nil {
		return err
	}
	if ok {
		s.mu.hs = hs
	}
	cs := &pb.ConfState{}
	if ok, err = s.getProto(groupKey(prefixRaft, kindConfState, s.group), cs); err != nil {
		return err
	} else if ok {
		s.mu.cs = pb.EnsureConfState(cs)
	}
	snap := &pb.Snapshot{}
	if ok, err = s.getProto(groupKey(prefixRaft, kindSnapshot, s.group), snap); err != nil {
		return err
	} else if ok {
		s.mu.snap = pb.EnsureSnapshot(snap)
	}
	k := groupKey(prefixRaft, kindTrunc, s.group)
	if v, closer, err := s.db.Get(k); err == nil {
		p, err := unseal(k, v)
		if err == nil && len(p) != 16 {
			err = fmt.Errorf("%w: key %x: truncated state of %d bytes", errCorrupt, k, len(p))
		}
		if err != nil {
			closer.Close()
			return err
		}
		s.mu.truncIndex = binary.BigEndian.Uint64(p[0:8])
		s.mu.truncTerm = binary.BigEndian.Uint64(p[8:16])
		closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	s.mu.last = s.mu.truncIndex
	it, err := s.db.NewIter(s.entryBounds(0, ^uint64(0)))
	if err != nil {
		return err
	}
	if it.Last() {
		s.mu.last = binary.BigEndian.Uint64(it.Key()[10:])
	}
	return errors.Join(it.Error(), it.Close())
}

func (s *Storage) getProto(k []byte, m proto.Message) (bool, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	p, err := unseal(k, v)
	if err != nil {
		return false, err
	}
	if err := proto.Unmarshal(p, m); err != nil {
		return false, fmt.Errorf("%w: key %x: %v", errCorrupt, k, err)
	}
	return true, nil
}

func (s *Storage) entryBounds(lo, hi uint64) *pebble.IterOptions {
	return &pebble.IterOptions{
		LowerBound: indexKey(prefixRaft, kindEntry, s.group, lo),
		UpperBound: indexKey(prefixRaft, kindEntry, s.group, hi),
	}
}

// InitialState implements raft.Storage.
func (s *Storage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hs *pb.HardState
	if s.mu.hs != nil {
		hs = proto.Clone(s.mu.hs).(*pb.HardState)
	}
	return hs, proto.Clone(s.mu.cs).(*pb.ConfState), nil
}

// termVote is the stored HardState's term and vote.
func (s *Storage) termVote() (term, vote uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.hs.GetTerm(), s.mu.hs.GetVote()
}

// Entries implements raft.Storage: entries [lo, hi), at least one if any,
// and no more than maxSize bytes of encoded entries after the first.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.Lock()
	trunc, last := s.mu.truncIndex, s.mu.last
	s.mu.Unlock()
	if lo <= trunc {
		return nil, raft.ErrCompacted
	}
	if hi > last+1 {
		return nil, fmt.Errorf("replica: group %d: entries [%d, %d) past the last index %d: %w",
			s.group, lo, hi, last, raft.ErrUnavailable)
	}
	if last == trunc {
		return nil, raft.ErrUnavailable
	}
	if lo >= hi {
		return nil, nil
	}
	s.mu.Lock()
	cached, ok := s.mu.cache.slice(lo, hi, maxSize)
	s.mu.Unlock()
	if ok {
		return cached, nil
	}
	it, err := s.db.NewIter(s.entryBounds(lo, hi))
	if err != nil {
		return nil, fmt.Errorf("replica: group %d: entries: %w", s.group, err)
	}
	var (
		ents []*pb.Entry
		size uint64
	)
	want := lo
	for ok := it.First(); ok; ok = it.Next() {
		e, err := decodeEntry(it.Key(), it.Value())
		if err == nil && e.GetIndex() != want {
			err = fmt.Errorf("%w: group %d: entry %d where %d was expected", errCorrupt, s.group, e.GetIndex(), want)
		}
		if err != nil {
			return nil, errors.Join(err, it.Close())
		}
		size += uint64(proto.Size(e))
		if len(ents) > 0 && size > maxSize {
			break
		}
		ents = append(ents, e)
		want++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("replica: group %d: entries: %w", s.group, err)
	}
	if len(ents) == 0 || (want < hi && size <= maxSize) {
		return nil, fmt.Errorf("replica: group %d: entry %d missing: %w", s.group, want, raft.ErrUnavailable)
	}
	return ents, nil
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	trunc, truncTerm, last := s.mu.truncIndex, s.mu.truncTerm, s.mu.last
	t, cached := s.mu.cache.term(i)
	s.mu.Unlock()
	if cached {
		return t, nil
	}
	switch {
	case i < trunc:
		return 0, raft.ErrCompacted
	case i == trunc:
		return truncTerm, nil
	case i > last:
		return 0, raft.ErrUnavailable
	}
	k := indexKey(prefixRaft, kindEntry, s.group, i)
	v, closer, err := s.db.Get(k)
	if err != nil {
		return 0, fmt.Errorf("replica: group %d: term of %d: %w", s.group, i, err)
	}
	defer closer.Close()
	p, err := unseal(k, v)
	if err != nil {
		return 0, err
	}
	if len(p) < 8 {
		return 0, fmt.Errorf("%w: key %x: short entry", errCorrupt, k)
	}
	return binary.BigEndian.Uint64(p[:8]), nil
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.last, nil
}

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.truncIndex + 1, nil
}

// setBuild sets the group's snapshot builder (see Storage.build).
func (s *Storage) setBuild(f func() (*pb.Snapshot, error)) { s.build = f }

// Snapshot implements raft.Storage: the last snapshot applied, or, once the
// log has been compacted past it, one built at the state machine's applied
// index (metadata only: the records are fetched, catchup.go), kept until the
// log is compacted past it too. Without a builder it is the last snapshot
// applied, as in raft.MemoryStorage; a builder that fails answers
// raft.ErrSnapshotTemporarilyUnavailable, and raft asks again later.
//
// A snapshot taken before the last configuration change applied here is built again: a
// member added since (a learner a replica moves to) is not in its ConfState, and raft on
// that member ignores a snapshot that does not name it, so the leader would send it the same
// stale snapshot until the log was next compacted.
func (s *Storage) Snapshot() (*pb.Snapshot, error) {
	s.mu.Lock()
	trunc := s.mu.truncIndex
	current := func(snap *pb.Snapshot) bool {
		return s.build == nil || proto.Equal(pb.EnsureConfState(snap.GetMetadata().GetConfState()), s.mu.cs)
	}
	if s.build == nil || s.mu.snap.GetMetadata().GetIndex() >= trunc && current(s.mu.snap) {
		defer s.mu.Unlock()
		return proto.Clone(s.mu.snap).(*pb.Snapshot), nil
	}
	if b := s.mu.built; b != nil && b.GetMetadata().GetIndex() >= trunc && current(b) {
		s.mu.Unlock()
		return b, nil
	}
	s.mu.Unlock()
	snap, err := s.build() // reads the storage: not under the lock
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.mu.built = snap
	s.mu.Unlock()
	return snap, nil
}

// commit writes b synced and then runs the in-memory updates.
func (s *Storage) commit(b *pebble.Batch, after ...func()) error {
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("replica: group %d: commit: %w", s.group, err)
	}
	for _, f := range after {
		f()
	}
	return nil
}

// write stages one change into a batch, commits it synced and then runs
// the change's in-memory update.
func (s *Storage) write(stage func(*pebble.Batch) (func(), error)) error {
	b := s.db.NewBatch()
	defer b.Close()
	after, err := stage(b)
	if err != nil || after == nil {
		return err
	}
	return s.commit(b, after)
}

// Append stores entries in one synced batch, replacing any conflicting
// suffix of the log (as raft.MemoryStorage.Append does). Entries before the
// first index are ignored; entries that would leave a hole are refused.
func (s *Storage) Append(ents []*pb.Entry) error {
	return s.write(func(b *pebble.Batch) (func(), error) { return s.stageAppend(b, ents) })
}

// stageAppend writes ents into b and returns the update of the in-memory
// state to run once b is durable (nil if there is nothing to write).
func (s *Storage) stageAppend(b *pebble.Batch, ents []*pb.Entry) (func(), error) {
	return s.stageAppendAfter(b, ents, 0)
}

// stageAppendAfter is stageAppend after a snapshot at index snap staged in
// the same batch (0: none), whose in-memory update runs before this one's.
func (s *Storage) stageAppendAfter(b *pebble.Batch, ents []*pb.Entry, snap uint64) (func(), error) {
	if len(ents) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	first, last := s.mu.truncIndex+1, s.mu.last
	s.mu.Unlock()
	if snap > 0 {
		first, last = snap+1, snap
	}
	for i := 1; i < len(ents); i++ {
		if ents[i].GetIndex() != ents[i-1].GetIndex()+1 {
			return nil, fmt.Errorf("replica: group %d: append: entry %d follows %d", s.group, ents[i].GetIndex(), ents[i-1].GetIndex())
		}
	}
	newLast := ents[0].GetIndex() + uint64(len(ents)) - 1
	if newLast < first {
		return nil, nil
	}
	if first > ents[0].GetIndex() {
		ents = ents[first-ents[0].GetIndex():]
	}
	if ents[0].GetIndex() > last+1 {
		return nil, fmt.Errorf("replica: group %d: append at %d leaves a hole after the last index %d", s.group, ents[0].GetIndex(), last)
	}
	sizes := make([]uint64, len(ents))
	for i, e := range ents {
		// Encoded straight into the batch: entries are most of its bytes.
		k := indexKey(prefixRaft, kindEntry, s.group, e.GetIndex())
		size := proto.Size(e)
		op := b.SetDeferred(len(k), entryValueSize(size))
		copy(op.Key, k)
		if err := putEntry(op.Value, k, e, size); err != nil {
			return nil, err
		}
		if err := op.Finish(); err != nil {
			return nil, err
		}
		sizes[i] = uint64(size)
	}
	if newLast < last {
		// Truncate the conflicting suffix the new entries did not overwrite.
		o := s.entryBounds(newLast+1, last+1)
		if err := b.DeleteRange(o.LowerBound, o.UpperBound, nil); err != nil {
			return nil, err
		}
	}
	return func() {
		s.mu.Lock()
		s.mu.last = newLast
		s.mu.cache.add(ents, sizes)
		s.mu.Unlock()
	}, nil
}

// SetHardState stores hs in one synced batch.
func (s *Storage) SetHardState(hs *pb.HardState) error {
	return s.write(func(b *pebble.Batch) (func(), error) { return s.stageHardState(b, hs) })
}

func (s *Storage) stageHardState(b *pebble.Batch, hs *pb.HardState) (func(), error) {
	hs = proto.Clone(hs).(*pb.HardState)
	if err := s.setProto(b, groupKey(prefixRaft, kindHardState, s.group), hs); err != nil {
		return nil, err
	}
	return func() {
		s.mu.Lock()
		s.mu.hs = hs
		s.mu.Unlock()
	}, nil
}

// stageConfState records the configuration after an applied conf change.
func (s *Storage) stageConfState(b *pebble.Batch, cs *pb.ConfState) (func(), error) {
	cs = pb.EnsureConfState(proto.Clone(cs).(*pb.ConfState))
	if err := s.setProto(b, groupKey(prefixRaft, kindConfState, s.group), cs); err != nil {
		return nil, err
	}
	return func() {
		s.mu.Lock()
		s.mu.cs = cs
		s.mu.Unlock()
	}, nil
}

func (s *Storage) setProto(b *pebble.Batch, k []byte, m proto.Message) error {
	p, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("replica: group %d: encode: %w", s.group, err)
	}
	return b.Set(k, seal(k, p), nil)
}

// ApplySnapshot replaces the log by snap (its ConfState becomes the
// group's), in one synced batch. A snapshot not newer than the current one is
// refused with raft.ErrSnapOutOfDate; index 0 is allowed on an empty group to
// bootstrap its configuration, as with raft.MemoryStorage.
func (s *Storage) ApplySnapshot(snap *pb.Snapshot) error {
	return s.write(func(b *pebble.Batch) (func(), error) { return s.stageSnapshot(b, snap) })
}

func (s *Storage) stageSnapshot(b *pebble.Batch, snap *pb.Snapshot) (func(), error) {
	snap = pb.EnsureSnapshot(proto.Clone(pb.EnsureSnapshot(snap)).(*pb.Snapshot))
	s.mu.Lock()
	cur := s.mu.snap.GetMetadata().GetIndex()
	s.mu.Unlock()
	idx, term := snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
	if cur != 0 && cur >= idx {
		return nil, raft.ErrSnapOutOfDate
	}
	if err := s.setProto(b, groupKey(prefixRaft, kindSnapshot, s.group), snap); err != nil {
		return nil, err
	}
	csAfter, err := s.stageConfState(b, snap.GetMetadata().GetConfState())
	if err != nil {
		return nil, err
	}
	if err := s.stageTrunc(b, idx, term); err != nil {
		return nil, err
	}
	o := s.entryBounds(0, ^uint64(0))
	if err := b.DeleteRange(o.LowerBound, o.UpperBound, nil); err != nil {
		return nil, err
	}
	return func() {
		csAfter()
		s.mu.Lock()
		s.mu.snap = snap
		s.mu.truncIndex, s.mu.truncTerm, s.mu.last = idx, term, idx
		s.mu.cache.reset()
		s.mu.Unlock()
	}, nil
}

func (s *Storage) stageTrunc(b *pebble.Batch, idx, term uint64) error {
	k := groupKey(prefixRaft, kindTrunc, s.group)
	var p [16]byte
	binary.BigEndian.PutUint64(p[0:8], idx)
	binary.BigEndian.PutUint64(p[8:16], term)
	return b.Set(k, seal(k, p[:]), nil)
}

// Compact discards the entries up to and including index i (its term stays
// known), in one synced batch. The caller must not compact past what its
// state machine has applied.
func (s *Storage) Compact(i uint64) error {
	term, err := s.Term(i)
	if err != nil && !errors.Is(err, raft.ErrCompacted) && !errors.Is(err, raft.ErrUnavailable) {
		return err // the other two: stageCompact names the problem
	}
	return s.write(func(b *pebble.Batch) (func(), error) { return s.stageCompact(b, i, term, 0) })
}

// pointDeleteMax is the most entries stageCompact deletes one by one.
const pointDeleteMax = 4096

// stageCompact writes into b the discarding of the entries up to and
// including i, whose term is term, and returns the in-memory update to run
// once b is durable. It answers raft.ErrCompacted when i is not past the
// entries already discarded, and refuses to compact past the last index
// (or staged, the last index of entries staged in b before).
func (s *Storage) stageCompact(b *pebble.Batch, i, term, staged uint64) (func(), error) {
	s.mu.Lock()
	trunc, last := s.mu.truncIndex, max(s.mu.last, staged)
	s.mu.Unlock()
	if i <= trunc {
		return nil, raft.ErrCompacted
	}
	if i > last {
		return nil, fmt.Errorf("replica: group %d: compact %d past the last index %d", s.group, i, last)
	}
	if err := s.stageTrunc(b, i, term); err != nil {
		return nil, err
	}
	if i-trunc <= pointDeleteMax {
		// Point deletions: a flush drops an entry set and deleted within
		// one memtable, so the raft copy of a record never reaches an
		// sstable (a range deletion would not spare it).
		for j := trunc + 1; j <= i; j++ {
			if err := b.Delete(indexKey(prefixRaft, kindEntry, s.group, j), nil); err != nil {
				return nil, err
			}
		}
	} else {
		o := s.entryBounds(0, i+1)
		if err := b.DeleteRange(o.LowerBound, o.UpperBound, nil); err != nil {
			return nil, err
		}
	}
	return func() {
		s.mu.Lock()
		s.mu.truncIndex, s.mu.truncTerm = i, term
		s.mu.cache.dropThrough(i)
		s.mu.Unlock()
	}, nil
}

// dropCache forgets the cached entries (they stay in Pebble, where Entries reads them
// should it need them): a group going quiet has everything applied and every follower
// caught up, so its cache would only hold memory while it sleeps; it fills again from
// the next entry stored.
func (s *Storage) dropCache() {
	s.mu.Lock()
	s.mu.cache.reset()
	s.mu.Unlock()
}

// encodeEntry frames an entry as term u64 BE | protobuf, so that Term reads
// eight bytes instead of decoding the entry, sealed for key k.
func encodeEntry(k []byte, e *pb.Entry) ([]byte, error) {
	size := proto.Size(e)
	v := make([]byte, entryValueSize(size))
	if err := putEntry(v, k, e, size); err != nil {
		return nil, err
	}
	return v, nil
}

// entryValueSize is the length of the sealed value of an entry whose
// protobuf size is size.
func entryValueSize(size int) int { return 5 + 8 + size }

// putEntry writes encodeEntry's value into v (of entryValueSize(size)
// bytes), size being the entry's protobuf size.
func putEntry(v, k []byte, e *pb.Entry, size int) error {
	binary.BigEndian.PutUint64(v[5:13], e.GetTerm())
	out, err := proto.MarshalOptions{}.MarshalAppend(v[13:13], e)
	if err == nil && (len(out) != size || size > 0 && &out[0] != &v[13]) {
		err = fmt.Errorf("encoded in %d bytes, sized %d", len(out), size)
	}
	if err != nil {
		return fmt.Errorf("replica: encode entry %d: %w", e.GetIndex(), err)
	}
	sealHeader(k, v)
	return nil
}

func decodeEntry(k, v []byte) (*pb.Entry, error) {
	p, err := unseal(k, v)
	if err != nil {
		return nil, err
	}
	if len(p) < 8 {
		return nil, fmt.Errorf("%w: key %x: short entry", errCorrupt, k)
	}
	e := &pb.Entry{}
	if err := proto.Unmarshal(p[8:], e); err != nil {
		return nil, fmt.Errorf("%w: key %x: %v", errCorrupt, k, err)
	}
	return e, nil
}
