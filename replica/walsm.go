package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/wal"
)

// WalSM is the StateMachine of replicated topics: applying a group's
// committed entries (WalEntry) writes, into the driver's round batch, the
// records at dense offsets in wal's own key layout and encoding (so wal's
// Read, Scanner, Notify, OffsetForTime and retention serve them unchanged),
// the de-duplication window, mirror cursors and consumer positions, and the
// group's applied index (I9, I10). Once the driver reports the batch
// committed, the topics' high-watermarks advance and Notify watchers wake
// (I3: nothing past the applied index is served).
//
// Every replica given the same entries writes the same state: times are the
// proposer's clock clamped to never decrease, de-duplication looks only at a
// window stored in the group's state, and a malformed entry is a no-op with
// an error result on every replica alike. An entry of a newer build
// (ErrEntryNewer) is not malformed: the newer replicas apply it, so this one
// stops rather than drift.
//
// The driver's goroutine owns all of it; Propose may be called from any
// goroutine.
type WalSM struct {
	// jumps: per topic, the log start of the snapshot being caught up to, when it is past
	// this replica's end (Missing sets it, ImportChunk uses it).
	jumps   map[string]uint64
	w       *wal.ReplicaWriter
	log     *wal.Log
	db      *pebble.DB
	window  int
	groupOf func(topic string) uint64
	groups  map[uint64]*walGroup
	// entry is what applyEntry decodes each entry into, and stateKey and stateVal the
	// buffers Apply builds a topic's state key and value in (Batch.Set copies both): one
	// of each per entry and per topic was most of what applying a one-record publish
	// allocated (issue 29, BenchmarkProposeTopics).
	entry              WalEntry
	stateKey, stateVal []byte
	// results: the rest of a block of appends' results, handed out one by one (newResult).
	results []wal.AppendResult
}

// resultBlock is how many appends' results newResult allocates at once.
const resultBlock = 64

// newResult returns an append's result, zero, from a block allocated for that many: one
// allocation each was a third of what a replica's apply allocated per one-record publish
// (issue 29, BenchmarkProposeTopics). Each is handed out once; a block lives while one of
// its results does.
func (s *WalSM) newResult() *wal.AppendResult {
	if len(s.results) == 0 {
		s.results = make([]wal.AppendResult, resultBlock)
	}
	r := &s.results[0]
	s.results = s.results[1:]
	return r
}

// WalSMConfig configures a WalSM.
type WalSMConfig struct {
	// Log holds the replicated topics; its DB (Log.DB) must be the
	// driver's Config.DB. Required.
	Log *wal.Log
	// DedupWindow is how many records with a producer and sequence each
	// group remembers, to answer a retried publish with its original
	// offset. Every replica of a group must use the same value (it decides
	// which records are stored). Each costs about 100 bytes of memory and
	// one small key. Default 4096.
	DedupWindow int
	// GroupOf maps a topic to the raft group that holds it, or to 0 while
	// this replica does not know it yet; every replica must use the same
	// mapping once it knows (an entry of a topic in another group than its
	// own applies as a no-op; one of a topic not known yet applies in the
	// group it came in, which must be the topic's). Default TopicGroup: one
	// group per topic. Groups may hold many topics.
	GroupOf func(topic string) uint64
}

// DefaultDedupWindow is WalSMConfig.DedupWindow's default.
const DefaultDedupWindow = 4096

// TopicGroup is the default mapping of topics to groups: one group per
// topic, named by the FNV-1a hash of its name (never 0). Two topics that
// share a hash share a group, which is correct (entries name their topic),
// only less parallel.
func TopicGroup(topic string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(topic))
	return max(h.Sum64(), 1)
}

// Key kinds of WalSM in a group's 'L' key space (see doc.go).
const (
	kindWalApplied = 'w' // applied index u64 | keyed records u64
	kindWalTopic   = 'T' // + topic: next offset u64 | last time i64 [| first offset u64, once cut]
	kindWalDedup   = 'd' // + ordinal u64: topic str | producer str | sequence | offset | time
)

type walGroup struct {
	id      uint64
	applied uint64
	keyed   uint64 // records with a producer applied so far: the next ordinal
	topics  map[string]*walTopic
	dedup   map[dedupKey]*dedupProducer
	ring    []ringEnt // the window's ordinals [keyed-len(ring), keyed), oldest first
	// changed: the topics whose state changed since Apply last stored it (walTopic.dirty),
	// so that Apply stores those and does not look at every topic of the group: a group
	// holds thousands of topics, and scanning them all made each apply cost the group's
	// size (creating 100,000 topics slowed as they grew).
	changed []string
}

// markDirty notes that topic name's state st changed: Apply stores it.
func (g *walGroup) markDirty(name string, st *walTopic) {
	if !st.dirty {
		st.dirty = true
		g.changed = append(g.changed, name)
	}
}

type walTopic struct {
	name     string // its key in walGroup.topics (decodeEntryInto reuses it)
	next     uint64
	lastTime int64
	first    uint64 // the log start: records below it were cut (EntryTruncate)
	dirty    bool
}

// encodeTopicState is a topic's applied state: 16 bytes while its log starts at 0 (the
// layout before cuts existed), 24 with its log start.
func encodeTopicState(st *walTopic) []byte { return appendTopicState(make([]byte, 0, 24), st) }

// appendTopicState appends encodeTopicState's layout to p.
func appendTopicState(p []byte, st *walTopic) []byte {
	p = binary.BigEndian.AppendUint64(p, st.next)
	p = binary.BigEndian.AppendUint64(p, uint64(st.lastTime))
	if st.first > 0 {
		p = binary.BigEndian.AppendUint64(p, st.first)
	}
	return p
}

// decodeTopicState reads encodeTopicState's layout; ok is false for another length or
// a log start past the next offset.
func decodeTopicState(p []byte) (st walTopic, ok bool) {
	if len(p) != 16 && len(p) != 24 {
		return walTopic{}, false
	}
	st.next = binary.BigEndian.Uint64(p[0:8])
	st.lastTime = int64(binary.BigEndian.Uint64(p[8:16]))
	if len(p) == 24 {
		st.first = binary.BigEndian.Uint64(p[16:24])
	}
	return st, st.first <= st.next
}

// NewWalSM returns the state machine of cfg.Log's replicated topics. It
// checks that replica's key spaces and wal's cannot collide.
func NewWalSM(cfg WalSMConfig) (*WalSM, error) {
	if cfg.Log == nil {
		return nil, errors.New("replica: wal state machine: Log is required")
	}
	if cfg.DedupWindow < 0 {
		return nil, fmt.Errorf("replica: wal state machine: DedupWindow must not be negative, got %d", cfg.DedupWindow)
	}
	for _, p := range []byte{prefixRaft, prefixLog} {
		if slices.Contains(wal.KeyPrefixes(), p) {
			return nil, fmt.Errorf("replica: wal state machine: key prefix %q is used by both wal and replica", p)
		}
	}
	w, err := cfg.Log.ReplicaWriter()
	if err != nil {
		return nil, fmt.Errorf("replica: wal state machine: %w", err)
	}
	s := &WalSM{w: w, log: cfg.Log, db: cfg.Log.DB(), window: cfg.DedupWindow, groupOf: cfg.GroupOf, groups: make(map[uint64]*walGroup),
		jumps: make(map[string]uint64)}
	if s.window == 0 {
		s.window = DefaultDedupWindow
	}
	if s.groupOf == nil {
		s.groupOf = TopicGroup
	}
	return s, nil
}

// Group returns the group that holds topic (0: not known here yet).
func (s *WalSM) Group(topic string) uint64 { return s.groupOf(topic) }

// elsewhere reports whether topic is known to belong to a group other than group, and
// which: an entry, snapshot or chunk of it in group is then refused. A topic whose group
// GroupOf does not know yet (0) belongs to the group its entries come in.
func (s *WalSM) elsewhere(topic string, group uint64) (uint64, bool) {
	g := s.groupOf(topic)
	return g, g != 0 && g != group
}

// Applied implements StateMachine: it loads the group's state.
func (s *WalSM) Applied(group uint64) (uint64, error) {
	if g := s.groups[group]; g != nil {
		return g.applied, nil
	}
	g := &walGroup{id: group, topics: make(map[string]*walTopic), dedup: make(map[dedupKey]*dedupProducer)}
	k := groupKey(prefixLog, kindWalApplied, group)
	switch v, closer, err := s.db.Get(k); {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return 0, fmt.Errorf("replica: group %d: applied state: %w", group, err)
	default:
		p, err := unseal(k, v)
		if err == nil && len(p) != 16 {
			err = fmt.Errorf("%w: key %x: applied state of %d bytes", errCorrupt, k, len(p))
		}
		if err != nil {
			_ = closer.Close()
			return 0, err
		}
		g.applied = binary.BigEndian.Uint64(p[0:8])
		g.keyed = binary.BigEndian.Uint64(p[8:16])
		_ = closer.Close()
	}
	if err := s.loadTopics(g); err != nil {
		return 0, err
	}
	if err := s.settleLoaded(g); err != nil {
		return 0, err
	}
	if err := s.loadDedup(g); err != nil {
		return 0, err
	}
	s.groups[group] = g
	return g.applied, nil
}

// scanGroup calls fn for every key of the group's kind, in order.
func (s *WalSM) scanGroup(group uint64, kind byte, fn func(k, p []byte) error) error {
	lo := groupKey(prefixLog, kind, group)
	hi := groupKey(prefixLog, kind+1, group)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("replica: group %d: load: %w", group, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		p, err := unseal(it.Key(), it.Value())
		if err == nil {
			err = fn(it.Key()[len(lo):], p)
		}
		if err != nil {
			return errors.Join(err, it.Close())
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("replica: group %d: load: %w", group, err)
	}
	return nil
}

func (s *WalSM) loadTopics(g *walGroup) error {
	return s.scanGroup(g.id, kindWalTopic, func(k, p []byte) error {
		ts, ok := decodeTopicState(p)
		if !ok {
			return fmt.Errorf("%w: group %d: topic state of %d bytes", errCorrupt, g.id, len(p))
		}
		name := string(k)
		st := &ts
		st.name = name
		// The records and this state are written in one batch: they agree
		// unless the store is damaged, or a catch-up left records past the
		// state (fetched for a snapshot not installed: settleLoaded discards them).
		if next, _, ok := s.w.Next(name); !ok || next < st.next {
			return fmt.Errorf("%w: group %d: topic %q: applied state says next offset %d, the log has %d (bound %v)", errCorrupt, g.id, name, st.next, next, ok)
		}
		g.topics[name] = st
		return nil
	})
}

// settleLoaded discards, as the group opens, the records its topics hold past their
// applied state: a catch-up's, fetched for a snapshot that was not installed before the node
// stopped. The log opened with them as written, so until an apply settled the topic it
// would serve records this replica has not applied (I9), and a hole below them where the
// catch-up jumped (its reads fail: "durable record missing"). One synced batch.
func (s *WalSM) settleLoaded(g *walGroup) error {
	var b *pebble.Batch
	for _, name := range slices.Sorted(maps.Keys(g.topics)) {
		st := g.topics[name]
		if next, _, ok := s.w.Next(name); !ok || next <= st.next {
			continue
		}
		if b == nil {
			b = s.db.NewBatch()
			defer b.Close()
		}
		if err := s.w.Truncate(b, name, st.next, st.lastTime); err != nil {
			return fmt.Errorf("replica: group %d: discard %q past its applied state: %w", g.id, name, err)
		}
	}
	if b == nil {
		return nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("replica: group %d: discard records past the applied state: %w", g.id, err)
	}
	return nil
}

// Apply implements StateMachine.
func (s *WalSM) Apply(b *pebble.Batch, group, applied uint64, ents []Entry) ([]Result, error) {
	g := s.groups[group]
	if g == nil {
		return nil, fmt.Errorf("replica: group %d: apply before Applied opened it", group)
	}
	if applied <= g.applied {
		return nil, nil // re-applied after a restart: already stored
	}
	var res []Result
	for _, e := range ents {
		if e.Index <= g.applied {
			continue
		}
		if e.Index > applied {
			return nil, fmt.Errorf("replica: group %d: entry %d past the applied index %d", group, e.Index, applied)
		}
		r, err := s.applyEntry(b, g, e)
		if err != nil {
			return nil, fmt.Errorf("replica: group %d: entry %d: %w", group, e.Index, err)
		}
		res = append(res, r)
	}
	g.applied = applied
	for _, name := range g.changed {
		st := g.topics[name]
		if st == nil || !st.dirty {
			continue // forgotten since, or stored already (noted twice)
		}
		st.dirty = false
		k := appendGroupKey(s.stateKey[:0], prefixLog, kindWalTopic, group)
		k = append(k, name...)
		v := appendTopicState(append(s.stateVal[:0], 0, 0, 0, 0, 0), st)
		sealHeader(k, v)
		s.stateKey, s.stateVal = k, v
		if err := b.Set(k, v, nil); err != nil {
			return nil, err
		}
	}
	clear(g.changed)
	g.changed = g.changed[:0]
	k := groupKey(prefixLog, kindWalApplied, group)
	var p [16]byte
	binary.BigEndian.PutUint64(p[0:8], g.applied)
	binary.BigEndian.PutUint64(p[8:16], g.keyed)
	if err := b.Set(k, seal(k, p[:]), nil); err != nil {
		return nil, err
	}
	return res, nil
}

// applyEntry applies one entry. An entry that cannot apply the same way on
// every replica (it is malformed, its topic belongs to another group) is a
// no-op with an error result; an error returned is this replica's own
// failure (its store, a topic local to this node) and stops the driver.
func (s *WalSM) applyEntry(b *pebble.Batch, g *walGroup, e Entry) (Result, error) {
	noop := func(err error) (Result, error) {
		return Result{Index: e.Index, Detail: &wal.AppendResult{Err: err}}, nil
	}
	// The records alias the entry: appendRecords encodes them into b, and nothing of we
	// outlives this call, so every entry is decoded into the one s.entry.
	we := &s.entry
	err := decodeEntryInto(e.Data, we, g.topics)
	if errors.Is(err, ErrEntryNewer) {
		// Newer replicas apply it: skipping it here would make this one diverge.
		return Result{}, fmt.Errorf("replica: group %d cannot apply entry %d: %w; upgrade this node to the version of the region's other nodes", g.id, e.Index, err)
	}
	if err != nil {
		return noop(err)
	}
	if crossTopics && we.Kind == EntryAppend {
		for _, name := range slices.Sorted(maps.Keys(g.topics)) {
			if name != we.Topic {
				we.Topic = name // broken_topics.go
				break
			}
		}
	}
	if got, ok := s.elsewhere(we.Topic, g.id); ok {
		return noop(fmt.Errorf("replica: %v entry of %q in group %d: the topic belongs to group %d", we.Kind, we.Topic, g.id, got))
	}
	if err := s.w.Bind(b, we.Topic, g.id); err != nil {
		return Result{}, err
	}
	st := g.topics[we.Topic]
	if st == nil {
		// No record of the topic applied yet: any stored are a catch-up's.
		st = &walTopic{name: we.Topic}
		g.topics[we.Topic] = st
	}
	if err := s.settle(b, we.Topic, st); err != nil {
		return Result{}, err
	}
	ts := max(e.Time, st.lastTime)
	switch we.Kind {
	case EntrySetPosition, EntryMirrorPosition, EntryMirrorGroup, EntrySetGroup, EntrySetConfig:
		if err := s.applyState(b, we, ts); err != nil {
			return Result{}, err
		}
		// Nothing appended: the answer is the topic's next offset.
		return Result{Index: e.Index, Offset: st.next, Time: st.lastTime, Detail: &wal.AppendResult{First: st.next}}, nil
	case EntryTruncate, EntryForget:
		return s.applyCut(b, g, e.Index, we, st)
	case EntryMirrorAppend:
		cur, ok := s.w.Position(we.Name, we.Topic)
		if ok != we.HasExpected || ok && cur != we.Expected {
			return noop(&CursorMismatchError{Topic: we.Topic, Region: we.Region, Name: we.Name,
				Expected: we.Expected, HasExpected: we.HasExpected, Stored: cur, HasStored: ok})
		}
		for i := range we.Records {
			we.Records[i].OriginRegion = we.Region
		}
		first, err := s.appendRecords(b, g, we.Topic, st, we.Records, ts)
		if err != nil {
			return Result{}, err
		}
		if err := s.w.SetPosition(b, wal.Position{Name: we.Name, Topic: we.Topic, Value: we.Value}, ts); err != nil {
			return Result{}, err
		}
		return Result{Index: e.Index, Offset: first, Time: ts,
			Detail: &wal.AppendResult{First: first, Count: len(we.Records), Time: ts}}, nil
	}
	return s.applyAppend(b, g, e.Index, we, st, ts)
}

// applyState applies an entry that stores state beside the topic's records and appends
// none: a durable position, a mirrored position or group, a consumer group's state (I10:
// in the batch of the records it describes), the topic's configuration.
func (s *WalSM) applyState(b *pebble.Batch, we *WalEntry, ts int64) error {
	switch we.Kind {
	case EntrySetPosition:
		return s.w.SetPosition(b, wal.Position{Name: we.Name, Topic: we.Topic, Value: we.Value, Vector: entryVector(we.Vector)}, ts)
	case EntryMirrorPosition, EntryMirrorGroup:
		return s.applyMirrored(b, we, ts) // walsm_mirror.go
	case EntrySetGroup:
		// A consumer group's state of the topic, stored as of the entry's time; nothing to
		// store is a barrier.
		switch op := we.Group; {
		case op == nil:
			return nil
		case op.Remove:
			return s.w.RemoveGroup(b, we.Name, we.Topic)
		case op.Settings != nil || op.State != nil:
			return s.w.SetGroup(b, we.Name, we.Topic, op.Settings, op.State, ts)
		}
		return nil
	case EntrySetConfig:
		return s.w.SetTopicConfig(b, we.Topic, we.Config)
	}
	return fmt.Errorf("replica: applyState of a %v entry", we.Kind)
}

// applyCut applies a truncation (retention or a purge) or a forget: the same cut on every
// replica, the entry's offset (the next one for a purge or a forget), never past what is
// applied; a forget then drops the topic.
func (s *WalSM) applyCut(b *pebble.Batch, g *walGroup, index uint64, we *WalEntry, st *walTopic) (Result, error) {
	cut := st.next
	if we.Kind == EntryTruncate && !we.Purge {
		cut = we.Value
	}
	cr, err := s.w.Cut(b, we.Topic, min(cut, st.next), false)
	if err != nil {
		return Result{}, err
	}
	if cr.Cut > st.first {
		st.first = cr.Cut
		g.markDirty(we.Topic, st)
	}
	if we.Kind == EntryForget {
		if _, _, err := s.w.Forget(b, we.Topic); err != nil {
			return Result{}, err
		}
	}
	return Result{Index: index, Offset: st.next, Time: st.lastTime,
		Detail: &TruncateResult{First: cr.First, Cut: cr.Cut, Next: st.next}}, nil
}

// applyAppend applies publishes: de-duplicated against the group's window (the window's
// changes stored in the same batch), then appended at the topic's next offsets (I9).
func (s *WalSM) applyAppend(b *pebble.Batch, g *walGroup, index uint64, we *WalEntry, st *walTopic, ts int64) (Result, error) {
	ar := s.newResult()
	*ar = wal.AppendResult{First: st.next, Time: ts}
	// Filtered in place: the entry was decoded for this apply alone (applyEntry already
	// writes into its records), and a slice grown record by record cost a leader 1% of its
	// CPU under 16 publishers (issue 29's profile), reallocating an entry's 512 records.
	kept := we.Records[:0]
	type fresh struct {
		key dedupKey
		seq uint64
	}
	var added []fresh
	for i := range we.Records {
		rec := &we.Records[i]
		rec.OriginRegion = ""
		if rec.ProducerID == "" || rec.Sequence == 0 {
			kept = append(kept, *rec)
			continue
		}
		key := dedupKey{topic: we.Topic, producer: rec.ProducerID}
		if p := g.dedup[key]; p != nil {
			if j, found := p.find(rec.Sequence); found {
				ar.Skipped = append(ar.Skipped, wal.Skipped{Index: i, Offset: p.ents[j].off, Time: p.ents[j].time})
				continue
			}
			if rec.Sequence < p.ents[0].seq {
				ar.Skipped = append(ar.Skipped, wal.Skipped{Index: i, Err: &wal.SequenceError{
					Topic: we.Topic, ProducerID: rec.ProducerID, Sequence: rec.Sequence,
					Floor: p.ents[0].seq - 1, Window: s.window}})
				continue
			}
		}
		off := st.next + uint64(len(kept))
		s.remember(g, key, dedupEnt{seq: rec.Sequence, off: off, time: ts})
		added = append(added, fresh{key, rec.Sequence})
		kept = append(kept, *rec)
	}
	// Store what entered the window; drop (in memory and stored) what left it.
	for _, a := range added {
		p := g.dedup[a.key]
		j, _ := p.find(a.seq)
		if err := s.storeDedup(b, g, a.key, p.ents[j]); err != nil {
			return Result{}, err
		}
		g.keyed++
	}
	for len(g.ring) > s.window {
		ord := s.forgetOldest(g, g.keyed)
		if err := b.Delete(indexKey(prefixLog, kindWalDedup, g.id, ord), nil); err != nil {
			return Result{}, err
		}
	}
	first, err := s.appendRecords(b, g, we.Topic, st, kept, ts)
	if err != nil {
		return Result{}, err
	}
	ar.First, ar.Count = first, len(kept)
	if len(kept) == 0 {
		ts = st.lastTime
		ar.Time = ts
	}
	return Result{Index: index, Offset: first, Time: ts, Detail: ar}, nil
}

func (s *WalSM) appendRecords(b *pebble.Batch, g *walGroup, topic string, st *walTopic, recs []wal.Record, ts int64) (uint64, error) {
	first, err := s.w.Append(b, topic, recs, ts)
	if err != nil {
		return 0, err
	}
	if len(recs) > 0 {
		st.next = first + uint64(len(recs))
		st.lastTime = ts
		g.markDirty(topic, st)
	}
	return first, nil
}

// Committed implements StateMachine: the topics' high-watermarks advance to
// what was applied and Notify watchers wake.
func (s *WalSM) Committed() { s.w.Published() }

// CursorMismatchError is the result of a mirror append whose expected cursor
// is not the stored one: a link left behind by a leader change, or a retry
// of an append that was already applied. Nothing was written.
type CursorMismatchError struct {
	Topic, Region, Name string
	Expected            uint64
	HasExpected         bool
	Stored              uint64
	HasStored           bool
}

func (e *CursorMismatchError) Error() string {
	show := func(v uint64, ok bool) string {
		if !ok {
			return "none"
		}
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("replica: mirror append of %q from region %q: cursor %q is %s, the link expected %s: nothing written",
		e.Topic, e.Region, e.Name, show(e.Stored, e.HasStored), show(e.Expected, e.HasExpected))
}

// Is makes errors.Is(err, ErrCursorMismatch) true.
func (e *CursorMismatchError) Is(target error) bool { return target == ErrCursorMismatch }

// ErrCursorMismatch is matched by *CursorMismatchError.
var ErrCursorMismatch = errors.New("replica: mirror cursor mismatch")

// Propose proposes e to its topic's group through d (which must lead it)
// and returns, once the entry is committed and applied here, what applying
// it did: the offsets of its records (a duplicate's in Skipped), or Err: a
// *NotLeaderError, ErrDropped, a *CursorMismatchError, a malformed entry,
// or ctx's error (the outcome then unknown).
func (s *WalSM) Propose(ctx context.Context, d *Driver, e *WalEntry) wal.AppendResult {
	data, err := EncodeEntry(nil, e)
	if err != nil {
		return wal.AppendResult{Err: err}
	}
	g := s.groupOf(e.Topic)
	if g == 0 {
		return wal.AppendResult{Err: fmt.Errorf("replica: %v %q: %w: the topic's group is not known here yet", e.Kind, e.Topic, ErrUnknownGroup)}
	}
	r, err := d.Propose(ctx, g, data)
	if err != nil {
		return wal.AppendResult{Err: fmt.Errorf("replica: %v %q: %w", e.Kind, e.Topic, err)}
	}
	ar, ok := r.Detail.(*wal.AppendResult)
	if !ok {
		return wal.AppendResult{Err: fmt.Errorf("replica: %v %q: entry %d applied without a result", e.Kind, e.Topic, r.Index)}
	}
	return *ar
}

// TruncateResult is the result (Result.Detail) of an applied EntryTruncate.
type TruncateResult struct {
	First uint64 // the topic's first offset before
	Cut   uint64 // its first offset after (First when nothing was cut)
	Next  uint64 // its next offset
}

// ProposeTruncate proposes, through d (which must lead the topic's group), a cut of
// topic's log below before, or of every record when purge; it returns once the entry is
// applied here.
func (s *WalSM) ProposeTruncate(ctx context.Context, d *Driver, topic string, before uint64, purge bool) (TruncateResult, error) {
	e := &WalEntry{Kind: EntryTruncate, Topic: topic, Value: before, Purge: purge}
	if purge {
		e.Value = 0
	}
	return s.proposeCut(ctx, d, e)
}

// ProposeForget proposes, through d (which must lead the topic's group), the delete of
// topic (EntryForget); it returns once the entry is applied here.
func (s *WalSM) ProposeForget(ctx context.Context, d *Driver, topic string) (TruncateResult, error) {
	return s.proposeCut(ctx, d, &WalEntry{Kind: EntryForget, Topic: topic})
}

func (s *WalSM) proposeCut(ctx context.Context, d *Driver, e *WalEntry) (TruncateResult, error) {
	topic := e.Topic
	data, err := EncodeEntry(nil, e)
	if err != nil {
		return TruncateResult{}, err
	}
	g := s.groupOf(topic)
	if g == 0 {
		return TruncateResult{}, fmt.Errorf("replica: %v %q: %w: the topic's group is not known here yet", e.Kind, topic, ErrUnknownGroup)
	}
	r, err := d.Propose(ctx, g, data)
	if err != nil {
		return TruncateResult{}, fmt.Errorf("replica: %v %q: %w", e.Kind, topic, err)
	}
	switch det := r.Detail.(type) {
	case *TruncateResult:
		return *det, nil
	case *wal.AppendResult:
		if det.Err != nil {
			return TruncateResult{}, det.Err
		}
	}
	return TruncateResult{}, fmt.Errorf("replica: %v %q: entry %d applied without a result", e.Kind, topic, r.Index)
}
