package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Replicated topics: a topic whose log is kept in agreement by a raft group
// (package replica) is written only by the one goroutine that applies the
// group's committed entries, through a ReplicaWriter, into the batch that
// also carries the raft state of the round. Its records use the key layout
// and record encoding of every other topic, so Read, Scanner, Notify,
// OffsetForTime and retention serve it unchanged; the writer advances its
// high-watermark only after that batch is committed (Published).
//
// A topic is either local (Append) or replicated, never both: Append and
// SetPosition refuse a replicated topic with a *ReplicatedError, and Bind
// refuses a topic that has a local log. Which topics are replicated is
// stored ('g' | topic name -> raft group u64), so the refusal holds from
// Open on, before the raft groups are opened.

// prefixReplicated marks a replicated topic; see the package doc.
const prefixReplicated = 'g'

// KeyPrefixes returns the first bytes of every key the log writes. Another
// user of the Log's Pebble DB (see DB) must keep to keys that start with
// other bytes.
func KeyPrefixes() []byte {
	return []byte{prefixConfig, prefixReplicated, prefixNextID, prefixRecord, prefixPosition, prefixRetention, prefixGroup, prefixTopic}
}

// DB returns the Pebble DB the log is stored in, for state that must be
// written in the same batches as replicated topics (the raft log of
// package replica). It is valid until Close: whoever uses it must stop
// before the log is closed, and must not write keys that start with one of
// KeyPrefixes.
func (l *Log) DB() *pebble.DB { return l.pdb }

// ErrReplicated is matched (errors.Is) by *ReplicatedError.
var ErrReplicated = errors.New("wal: topic is replicated")

// ReplicatedError refuses a local append or position write to a topic whose
// log is replicated: it is written only through its raft group.
type ReplicatedError struct {
	Topic string
	Group uint64 // the raft group that holds it
}

func (e *ReplicatedError) Error() string {
	return fmt.Sprintf("wal: topic %q is replicated by raft group %d: it is written only through that group, not by a local append", e.Topic, e.Group)
}

// Is makes errors.Is(err, ErrReplicated) true.
func (e *ReplicatedError) Is(target error) bool { return target == ErrReplicated }

// replState is which topics are replicated and which are local; mu also
// guards the topic ID counter (l.c.nextID) after Open, since both the
// committer and a ReplicaWriter create topics. Lock order: repl.mu before
// Log.mu, never the other way.
//
// Only the committer stores the counter (putNextID), in offset order, so
// the stored value never goes back; a replicated topic's ID is covered by
// its 't' key, which is never deleted (delete and purge refuse replicated
// topics), so Open's maximum over the stored IDs and the counter never
// hands out an ID twice.
type replState struct {
	once    sync.Once
	loadErr error
	mu      sync.RWMutex
	// staged: the replicated topics a Bind created whose batch is not published yet
	// (ReplicaWriter.Published moves them into Log.mu.topics, then out of here). Written
	// only by the ReplicaWriter's goroutine (with mu held), which therefore reads it
	// without mu (ReplicaWriter.bound). A published replicated topic is the one in
	// Log.mu.topics whose group is not 0: a replica keeps no second map of its topics
	// beside the log's (issue 29: a map entry a topic was 3-5 MiB of each node's heap at
	// 100,000 topics, doubled in its RSS by the collector's goal). Nil when empty.
	staged map[string]*topic
	// local is the local topics the committer created that are not durable yet (Bind
	// refuses them, and the durable ones in Log.mu.topics; the committer finds them here,
	// committerTopic): each leaves it once its batch is durable (localDurable), after it
	// entered Log.mu.topics, and the map goes once empty, so a node does not keep an entry
	// the GC scans for every topic created since Open (issue 34's figure 3). Nil when
	// empty.
	local  map[string]*topic
	writer bool // a ReplicaWriter exists
}

// loadReplicated reads the stored markers once (the first time anything asks).
func (l *Log) loadReplicated() error {
	l.repl.once.Do(func() {
		db, err := l.readDB()
		if err != nil {
			l.repl.loadErr = err
			return
		}
		defer l.db.RUnlock()
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixReplicated}, UpperBound: []byte{prefixReplicated + 1}})
		if err != nil {
			l.repl.loadErr = fmt.Errorf("wal: load replicated topics: %w", err)
			return
		}
		l.mu.RLock() // recover filled l.mu.topics in Open: every topic with an ID
		for ok := it.First(); ok; ok = it.Next() {
			p, reason := openMeta(it.Key(), it.Value(), 8)
			name := string(it.Key()[1:])
			if reason != "" {
				l.repl.loadErr = &CorruptError{Topic: name, Reason: "replicated topic marker: " + reason}
				break
			}
			t := l.mu.topics[name]
			if t == nil {
				l.repl.loadErr = &CorruptError{Topic: name, Reason: "replicated topic marker without its topic ID"}
				break
			}
			t.group = binary.LittleEndian.Uint64(p) // before the topic is shared with a writer
		}
		l.mu.RUnlock()
		if err := errors.Join(it.Error(), it.Close()); err != nil && l.repl.loadErr == nil {
			l.repl.loadErr = fmt.Errorf("wal: load replicated topics: %w", err)
		}
	})
	return l.repl.loadErr
}

// refuseReplicated is the check of Append and SetPosition (caller's goroutine).
func (l *Log) refuseReplicated(topic string) error {
	if topic == "" {
		return nil
	}
	if err := l.loadReplicated(); err != nil {
		return err
	}
	l.repl.mu.RLock()
	t := l.replicatedLocked(topic)
	l.repl.mu.RUnlock()
	if t != nil {
		return &ReplicatedError{Topic: topic, Group: t.group}
	}
	return nil
}

// replicatedLocked is the replicated topic name, staged or published, or nil (l.repl.mu
// held, for reading at least; it takes Log.mu for reading: the lock order).
func (l *Log) replicatedLocked(name string) *topic {
	if t := l.repl.staged[name]; t != nil {
		return t
	}
	l.mu.RLock()
	t := l.mu.topics[name]
	l.mu.RUnlock()
	if t == nil || t.group == 0 {
		return nil
	}
	return t
}

// newLocalTopic creates a local topic in b for the committer, unless a
// ReplicaWriter bound the name meanwhile. Committer goroutine.
func (l *Log) newLocalTopic(b *pebble.Batch, name string) (*topic, error) {
	if err := l.loadReplicated(); err != nil {
		return nil, err
	}
	l.repl.mu.Lock()
	defer l.repl.mu.Unlock()
	if t := l.replicatedLocked(name); t != nil {
		return nil, &ReplicatedError{Topic: name, Group: t.group}
	}
	t, err := l.newTopic(b, name)
	if err != nil {
		return nil, err
	}
	if l.repl.local == nil {
		l.repl.local = make(map[string]*topic)
	}
	l.repl.local[name] = t
	return t, nil
}

// committerTopic is the local topic name as the committer sees it: created by it (durable
// or not yet), or recovered; nil when the log holds no local topic of that name (a
// replicated topic is not one: appending to it is refused as before, by newLocalTopic).
// It looks in repl.local before Log.mu.topics: a topic leaves repl.local only after it
// entered Log.mu.topics (publish, then localDurable), so no topic is missed between the
// two. Committer goroutine; it takes repl.mu then Log.mu for reading (the lock order).
func (l *Log) committerTopic(name string) *topic {
	if l.loadReplicated() != nil {
		// The markers could not be read: every append fails in newLocalTopic, and no
		// topic is told apart as replicated here.
		l.mu.RLock()
		defer l.mu.RUnlock()
		return l.mu.topics[name]
	}
	l.repl.mu.RLock()
	defer l.repl.mu.RUnlock()
	if t := l.repl.local[name]; t != nil {
		return t
	}
	if l.repl.staged[name] != nil {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if t := l.mu.topics[name]; t != nil && t.group == 0 {
		return t
	}
	return nil
}

// forgetLocal drops a deleted topic from the created ones not durable yet (a delete drains
// the completer first, so only a failed batch's topic could be there). Committer goroutine.
func (l *Log) forgetLocal(name string) {
	l.repl.mu.Lock()
	defer l.repl.mu.Unlock()
	delete(l.repl.local, name)
	if len(l.repl.local) == 0 {
		l.repl.local = nil
	}
}

// localDurable drops the topics of a durable batch (in Log.mu.topics now) from the ones
// created but not durable yet. Completer goroutine, holding no lock.
func (l *Log) localDurable(ts []*topic) {
	l.repl.mu.Lock()
	defer l.repl.mu.Unlock()
	for _, t := range ts {
		delete(l.repl.local, t.name)
	}
	if len(l.repl.local) == 0 {
		l.repl.local = nil // a map keeps its largest size
	}
}

// nextTopicID reads the topic ID counter for putNextID.
func (l *Log) nextTopicID() uint32 {
	l.repl.mu.RLock()
	defer l.repl.mu.RUnlock()
	return l.c.nextID
}

// refuseReplicatedAdmin refuses a topic operation (create, configure, purge,
// delete) on a replicated topic, and positions written or deleted on one:
// those change replicated state, which only the topic's group may.
// Retention skips replicated topics (retain): each replica would cut at its
// own time; their cuts are raft entries applied through the ReplicaWriter
// (replretain.go).
func (l *Log) refuseReplicatedAdmin(topic string, op *adminOp) error {
	switch op.kind {
	case opRetain:
		return nil
	case opPositions:
		for _, p := range op.positions {
			if err := l.refuseReplicated(p.key.topic); err != nil {
				return err
			}
		}
		return nil
	}
	return l.refuseReplicated(topic)
}

func replicatedKey(name string) []byte {
	k := make([]byte, 1+len(name))
	k[0] = prefixReplicated
	copy(k[1:], name)
	return k
}

// setMetaDeferred sets key prefix|name to payload sealed as sealMeta seals it, building both
// in b's buffer (what topicKey or replicatedKey and sealMeta would allocate).
func setMetaDeferred(b *pebble.Batch, prefix byte, name string, payload []byte) error {
	op := b.SetDeferred(1+len(name), len(metaHeader)+len(payload))
	op.Key[0] = prefix
	copy(op.Key[1:], name)
	copy(op.Value, metaHeader[:])
	copy(op.Value[len(metaHeader):], payload)
	sealMetaInPlace(op.Key, op.Value)
	return op.Finish()
}

// ReplicaWriter writes replicated topics into batches that their caller
// commits (the raft driver's round batch), and publishes what it wrote once
// told the batch is committed. One goroutine owns it: the one that applies
// committed entries. For its topics it owns what the committer owns for a
// local topic (next offset, byte position, last time).
type ReplicaWriter struct {
	l *Log

	// Staged since the last Published.
	touched   []*topic
	newTopics []*topic
	positions []posWrite
	staged    map[posName]uint64
	groups    map[string]int64            // mirrored group states staged: key -> Updated ns (groups_replicated.go)
	cuts      []cutDone                   // replretain.go
	configs   []*topic                    // topics whose configuration was written
	spos      map[*topic]*stagedPositions // byte positions of records appended
	freeSpos  []*stagedPositions          // emptied, for stagePos (recycleSpos)
	compact   chan compactJob             // to compactLoop
	// stagedGroups: per topic, the groups whose state of it was written since the last
	// Published (Forget removes those too).
	stagedGroups map[string]map[string]bool
	forgotten    []*topic // topics forgotten since the last Published (Forget)
}

// ReplicaWriter returns the writer of the log's replicated topics; a log has
// at most one.
func (l *Log) ReplicaWriter() (*ReplicaWriter, error) {
	if err := l.loadReplicated(); err != nil {
		return nil, err
	}
	l.repl.mu.Lock()
	defer l.repl.mu.Unlock()
	if l.repl.writer {
		return nil, fmt.Errorf("wal: replica writer: %w: the log has one already", ErrInvalidRequest)
	}
	w := &ReplicaWriter{l: l, staged: make(map[posName]uint64),
		spos: make(map[*topic]*stagedPositions), compact: make(chan compactJob, 64),
		stagedGroups: make(map[string]map[string]bool)}
	l.repl.writer = true
	if l.ctx != nil { // started by Open: stopped by Close
		l.wg.Add(1)
		go l.compactLoop(w.compact)
	}
	return w, nil
}

// Bind makes topic a replicated topic of group, creating it (in b) if the
// log does not hold it. It fails for a topic with a local log, or bound to
// another group.
func (w *ReplicaWriter) Bind(b *pebble.Batch, name string, group uint64) error {
	l := w.l
	if err := checkName("topic", name); err != nil {
		return fmt.Errorf("wal: bind %q: %w", name, err)
	}
	l.repl.mu.Lock()
	defer l.repl.mu.Unlock()
	if t := w.bound(name); t != nil {
		if t.group != group {
			return fmt.Errorf("wal: bind %q to raft group %d: %w: it is replicated by group %d", name, group, ErrInvalidRequest, t.group)
		}
		return nil
	}
	l.mu.RLock()
	_, durable := l.mu.topics[name]
	l.mu.RUnlock()
	if _, created := l.repl.local[name]; created || durable {
		return fmt.Errorf("wal: bind %q to raft group %d: %w: the topic has a local log on this node", name, group, ErrInvalidRequest)
	}
	if l.c.nextID == math.MaxUint32 {
		return fmt.Errorf("wal: bind %q: %w: every topic ID was used once", name, ErrInvalidRequest)
	}
	t := &topic{name: name, id: l.c.nextID, dedupReady: true, group: group}
	l.c.nextID++
	// Both keys are built in the batch's own buffer: a region creating topics in bulk
	// binds each on every replica, and four allocations a topic here were a tenth of what
	// a creation allocated over the region (TestBindAllocatesOnlyItsTopic).
	var id [4]byte
	binary.BigEndian.PutUint32(id[:], t.id)
	if err := setMetaDeferred(b, prefixTopic, name, id[:]); err != nil {
		return fmt.Errorf("wal: bind %q: %w", name, err)
	}
	var g [8]byte
	binary.LittleEndian.PutUint64(g[:], group)
	if err := setMetaDeferred(b, prefixReplicated, name, g[:]); err != nil {
		return fmt.Errorf("wal: bind %q: %w", name, err)
	}
	if l.repl.staged == nil {
		l.repl.staged = make(map[string]*topic)
	}
	l.repl.staged[name] = t
	w.newTopics = append(w.newTopics, t)
	return nil
}

// bound is the log of a bound topic, nil for another. Only the writer's goroutine writes
// l.repl.staged, so it reads the map without l.repl.mu; Log.mu.topics for reading, which
// the caller must not hold (boundLocked).
func (w *ReplicaWriter) bound(name string) *topic {
	if t := w.l.repl.staged[name]; t != nil {
		return t
	}
	w.l.mu.RLock()
	defer w.l.mu.RUnlock()
	return w.boundLocked(name)
}

// boundLocked is bound for a topic published (in Log.mu.topics), Log.mu held.
func (w *ReplicaWriter) boundLocked(name string) *topic {
	if t := w.l.mu.topics[name]; t != nil && t.group != 0 {
		return t
	}
	return nil
}

// Next returns the next offset of a bound topic and the time of the record
// before it, as written (published or not); ok is false for a topic not bound.
func (w *ReplicaWriter) Next(topic string) (next uint64, lastTime int64, ok bool) {
	t := w.bound(topic)
	if t == nil {
		return 0, 0, false
	}
	return t.next, t.lastTime, true
}

// Append writes recs into b at the bound topic's next offsets, all with time
// ts, and returns the first offset. Offset and Time of recs are ignored
// (OriginOffset = Offset for a record without OriginRegion, as in Append).
// ts must not be below the topic's last time: the caller clamps, so that
// every replica assigns the same times.
func (w *ReplicaWriter) Append(b *pebble.Batch, topic string, recs []Record, ts int64) (uint64, error) {
	t := w.bound(topic)
	if t == nil {
		return 0, fmt.Errorf("wal: replicated append %q: %w: topic not bound", topic, ErrInvalidRequest)
	}
	if ts < t.lastTime {
		return 0, fmt.Errorf("wal: replicated append %q: %w: time %d before the last record's %d", topic, ErrInvalidRequest, ts, t.lastTime)
	}
	first := t.next
	for i := range recs {
		rec := &recs[i]
		n := encodedLen(rec)
		op := b.SetDeferred(recordKeyLen, n)
		putRecordKey(op.Key, t.id, t.next)
		encodeRecord(op.Value, op.Key, rec, ts, t.nextPos)
		if err := op.Finish(); err != nil {
			return 0, fmt.Errorf("wal: replicated append %q: %w", topic, err)
		}
		w.stagePos(t, t.next, t.nextPos)
		t.next++
		t.nextPos += uint64(recordKeyLen + n)
	}
	if len(recs) > 0 {
		t.lastTime = ts
		if !t.touched {
			t.touched = true
			w.touched = append(w.touched, t)
		}
	}
	return first, nil
}

// SetPosition writes a named position of a bound topic into b, updated at
// the given time (unix nanoseconds), with its vector (as Log.SetPosition stores it).
func (w *ReplicaWriter) SetPosition(b *pebble.Batch, p Position, updated int64) error {
	if err := errors.Join(checkName("position name", p.Name), checkName("position topic", p.Topic)); err != nil {
		return fmt.Errorf("wal: replicated position %q of %q: %w", p.Name, p.Topic, err)
	}
	if w.bound(p.Topic) == nil {
		return fmt.Errorf("wal: replicated position %q of %q: %w: topic not bound", p.Name, p.Topic, ErrInvalidRequest)
	}
	if err := checkVector(p.Vector); err != nil { // position.go: stored as SetPosition stores it (v3)
		return fmt.Errorf("wal: replicated position %q of %q: %w", p.Name, p.Topic, err)
	}
	pw := putPosition(b, p.Topic, p.Name, posValue{v: p.Value, updated: updated, vec: maps.Clone(p.Vector)})
	w.positions = append(w.positions, pw)
	w.staged[pw.key] = p.Value
	return nil
}

// Position returns a position as written (published or not).
func (w *ReplicaWriter) Position(name, topic string) (uint64, bool) {
	if v, ok := w.staged[posName{name: name, topic: topic}]; ok {
		return v, true
	}
	w.l.mu.RLock()
	pv, ok := w.l.mu.positions.get(posName{name: name, topic: topic})
	w.l.mu.RUnlock()
	return pv.v, ok
}

// Published reports that every batch written so far is committed: the
// topics' high-watermarks advance to what was written, new topics and
// positions become visible, and Notify watchers wake, as the completer does
// for a local append.
func (w *ReplicaWriter) Published() {
	clear(w.groups)
	if len(w.cuts) > 0 || len(w.configs) > 0 || len(w.spos) > 0 || len(w.stagedGroups) > 0 || len(w.forgotten) > 0 {
		defer w.publishCuts() // after the high-watermarks moved
	}
	if len(w.touched) == 0 && len(w.newTopics) == 0 && len(w.positions) == 0 {
		return
	}
	l := w.l
	advances := make([]advance, 0, len(w.touched))
	var records, bytes uint64
	l.mu.Lock()
	for _, t := range w.touched {
		t.touched = false
		records += t.next - t.hwm
		bytes += t.nextPos - t.hwmPos
		from := t.hwm
		t.hwm, t.hwmPos = t.next, t.nextPos
		advances = append(advances, advance{t: t, hwm: t.next, hwmPs: t.nextPos})
		if l.mu.topics[t.name] == t {
			l.advanceLocked(t, from, true) // origins not told apart here: every advance reported
		}
	}
	for _, t := range w.newTopics {
		l.mu.topics[t.name] = t
		l.createdLocked(t.name)
	}
	for _, t := range w.newTopics {
		l.advanceLocked(t, t.first, true) // a new topic's log starts at its first offset
	}
	for _, p := range w.positions {
		if p.del {
			l.deletePositionLocked(p.key)
			continue
		}
		l.setPositionLocked(p.key, p.val)
	}
	l.mu.Unlock()
	l.stats.records.Add(records)
	l.stats.bytes.Add(bytes)
	l.m.appendedRecords.Add(float64(records))
	l.m.appendedBytes.Add(float64(bytes))
	l.m.logBytes.Add(float64(bytes))
	if len(w.newTopics) > 0 {
		l.m.topics.Add(float64(len(w.newTopics)))
	}
	if len(w.newTopics) > 0 {
		// In Log.mu.topics now: out of the staged ones (the refusals see them in one or
		// the other throughout).
		l.repl.mu.Lock()
		for _, t := range w.newTopics {
			delete(l.repl.staged, t.name)
		}
		if len(l.repl.staged) == 0 {
			l.repl.staged = nil // a map keeps its largest size
		}
		l.repl.mu.Unlock()
	}
	l.watch.wake(advances, len(w.newTopics) > 0)
	clear(w.touched)
	w.touched = w.touched[:0]
	w.newTopics = nil
	w.positions = w.positions[:0]
	clear(w.staged)
}

// IsLocal reports whether topic exists here as a local (single-copy) topic: binding it to
// a raft group would fail.
func (l *Log) IsLocal(topic string) bool {
	if _, _, ok := l.Bounds(topic); !ok {
		return false
	}
	return l.refuseReplicated(topic) == nil
}

// IsLocalAt is IsLocal of the log in (an Instance the caller kept): false for the zero
// Instance and a log deleted since.
func (l *Log) IsLocalAt(in Instance) bool {
	if _, _, ok := l.BoundsAt(in); !ok {
		return false
	}
	return l.refuseReplicated(in.t.name) == nil
}
