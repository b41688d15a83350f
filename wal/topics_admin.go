package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quicmq/quicmq/routing"
)

// Topic management: explicit creation, a durable per-topic configuration,
// purge and delete. Every operation here is a request to the committer, like
// an append, so it is ordered with the appends around it and the committer
// stays the one owner of offset assignment and of the topic table:
//
//   - Create and configuration changes are committed alone (one synced batch
//     each), never merged into a batch of appends.
//   - Purge and delete first drain the pipeline: the committer waits until
//     every batch it applied before is durable and published, so the topic's
//     high-watermark equals its next offset, and only then applies the
//     operation's batch. Appends queued meanwhile wait behind it (a purge or
//     delete costs the node one fsync of latency, once).
//
// Topic IDs are handed out by the committer from a counter stored at
// nextIDKey in the batch of every topic it creates; Open resumes it from the
// stored counter (or from the highest stored ID + 1 for stores older than
// the counter). An ID is never handed out twice, so a topic created after a
// delete of the same name gets a new ID, and no key left of the old one could
// ever be read as the new one's (none is left: the delete removes them all
// in its batch).

// TopicConfig is the durable configuration of one topic.
type TopicConfig struct {
	// Retention limits the topic's log when RetentionSet is true (a zero
	// Retention then keeps it forever); otherwise Options.Retention applies.
	Retention    Retention
	RetentionSet bool
}

// Topic configuration value layout, version 1 (little endian):
//
//	flags u8 (bit 0: retention set) | max age i64 ns | max bytes i64
const configLen = 1 + 8 + 8

func encodeConfig(c TopicConfig) []byte {
	var flags byte
	if c.RetentionSet {
		flags = 1
	}
	p := []byte{flags}
	p = binary.LittleEndian.AppendUint64(p, uint64(c.Retention.MaxAge))
	return binary.LittleEndian.AppendUint64(p, uint64(c.Retention.MaxBytes))
}

func decodeConfig(p []byte) (TopicConfig, string) {
	if p[0]&^1 != 0 {
		return TopicConfig{}, "unknown config flags"
	}
	c := TopicConfig{
		RetentionSet: p[0]&1 != 0,
		Retention: Retention{
			MaxAge:   time.Duration(binary.LittleEndian.Uint64(p[1:])),
			MaxBytes: int64(binary.LittleEndian.Uint64(p[9:])),
		},
	}
	if c.Retention.validate("") != nil {
		return TopicConfig{}, "negative retention"
	}
	return c, ""
}

var (
	// ErrTopicExists is matched (errors.Is) by *TopicExistsError.
	ErrTopicExists = errors.New("wal: topic exists")
	// ErrTopicDeleted is matched (errors.Is) by *TopicDeletedError.
	ErrTopicDeleted = errors.New("wal: topic deleted")
)

// TopicExistsError refuses CreateTopic for a topic that exists with another
// configuration (SetTopicConfig changes it).
type TopicExistsError struct {
	Topic  string
	Config TopicConfig // the configuration it has
}

func (e *TopicExistsError) Error() string {
	return fmt.Sprintf("wal: topic %q exists with another configuration (%s)", e.Topic, e.Config)
}

// Is makes errors.Is(err, ErrTopicExists) true.
func (e *TopicExistsError) Is(target error) bool { return target == ErrTopicExists }

// TopicDeletedError is returned to a reader of a topic deleted since Open (a
// Scanner whose topic was deleted gets it also after a topic of the same name
// was created again: that is another log, read it with a new Scanner), and to
// a position written alone for a topic deleted since Open.
type TopicDeletedError struct{ Topic string }

func (e *TopicDeletedError) Error() string {
	return fmt.Sprintf("wal: topic %q was deleted", e.Topic)
}

// Is makes errors.Is(err, ErrTopicDeleted) true.
func (e *TopicDeletedError) Is(target error) bool { return target == ErrTopicDeleted }

// String shows the configuration as an operator reads it.
func (c TopicConfig) String() string {
	if !c.RetentionSet {
		return "default retention"
	}
	if c.Retention == (Retention{}) {
		return "kept forever"
	}
	return fmt.Sprintf("retention max age %v, max bytes %d", c.Retention.MaxAge, c.Retention.MaxBytes)
}

// adminKind names an admin operation (also in its errors).
type adminKind string

const (
	opCreate    adminKind = "create topic"
	opConfigure adminKind = "configure topic"
	opPurge     adminKind = "purge topic"
	opDelete    adminKind = "delete topic"
	opRetain    adminKind = "retention"
	opPositions adminKind = "write positions of"
	opMark      adminKind = "clock mark" // clockmark.go
)

// adminOp is one operation for the committer (request.admin). The committer
// fills in the results before the completer calls done.
type adminOp struct {
	kind adminKind
	cfg  TopicConfig // create, configure

	// t is the topic operated on (retention: the topic the cut was computed
	// on, set by the caller; the others: set by the committer).
	t           *topic
	cut, cutPos uint64

	// positions: written (or deleted) in one batch.
	positions []posWrite

	// Results, set by the committer (before the batch is applied).
	mark                int64  // clock mark: the mark
	applied             bool   // something was written
	created             *topic // create, configure: a new topic
	prevFirst, prevPos  uint64 // purge, retention, delete: the first offset before
	cutTo, cutToPos     uint64 // purge, retention: the new first offset
	gone                *topic // delete: the deleted topic
	goneBytes, goneRecs uint64 // delete: what the topic held
}

// CreateTopic creates a topic with no records (listed by Topics with First
// and Next 0) and configuration cfg, with one synced write, and returns it.
// For a topic that exists with the same configuration it returns the topic as
// it is; with another configuration a *TopicExistsError (SetTopicConfig
// changes it). name must be a topic of routing's grammar.
func (l *Log) CreateTopic(ctx context.Context, name string, cfg TopicConfig) (TopicInfo, error) {
	return l.configure(ctx, opCreate, name, cfg)
}

// SetTopicConfig stores cfg as the configuration of a topic with one synced
// write, creating the topic if it does not exist; TopicConfig{} clears it back
// to the defaults of Options. A changed retention applies from the next
// retention pass.
func (l *Log) SetTopicConfig(ctx context.Context, name string, cfg TopicConfig) (TopicInfo, error) {
	return l.configure(ctx, opConfigure, name, cfg)
}

// SetRetention is SetTopicConfig with retention r (a zero r keeps the topic
// forever).
func (l *Log) SetRetention(ctx context.Context, name string, r Retention) error {
	_, err := l.SetTopicConfig(ctx, name, TopicConfig{Retention: r, RetentionSet: true})
	return err
}

func (l *Log) configure(ctx context.Context, kind adminKind, name string, cfg TopicConfig) (TopicInfo, error) {
	op := &adminOp{kind: kind, cfg: cfg}
	if err := routing.ValidateTopic(name); err != nil {
		return TopicInfo{}, fmt.Errorf("wal: %s %q: %w: %w", kind, name, ErrInvalidRequest, err)
	}
	if err := cfg.Retention.validate("Retention."); err != nil {
		return TopicInfo{}, fmt.Errorf("wal: %s %q: %w: %w", kind, name, ErrInvalidRequest, err)
	}
	if err := l.submitAdmin(ctx, name, op); err != nil {
		return TopicInfo{}, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if t := l.mu.topics[name]; t != nil {
		return t.infoLocked(), nil
	}
	// Deleted again by a later operation before we looked.
	return TopicInfo{}, fmt.Errorf("wal: %s %q: %w", kind, name, l.goneLocked(name))
}

// TopicConfig returns the durable configuration of a topic and whether the
// topic exists.
func (l *Log) TopicConfig(name string) (TopicConfig, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	t := l.mu.topics[name]
	if t == nil {
		return TopicConfig{}, false
	}
	return t.cfg, true
}

// PurgeResult is what a purge removed.
type PurgeResult struct {
	First   uint64 // the first offset before the purge
	Next    uint64 // the topic's next offset: the first of its next record
	Records uint64 // records deleted
}

// PurgeTopic deletes every record of a topic and keeps the topic: its next
// record gets the next offset (offsets are never reused), its configuration
// and its positions stay; every consumer group's floor on it moves up to the
// next offset, in the same batch. The new first offset is stored in the same synced
// batch as the deletion, as retention stores it, so a crash leaves the purge
// wholly done or not at all, and a reader of a purged offset gets the
// *OffsetOutOfRangeError that retention gives. Records appended concurrently
// are either purged (queued before) or kept (queued after). A retried
// idempotent publish of a purged record is still answered with its original
// (now purged) offset while its producer's window remembers it.
func (l *Log) PurgeTopic(ctx context.Context, name string) (PurgeResult, error) {
	op := &adminOp{kind: opPurge}
	if err := l.submitAdmin(ctx, name, op); err != nil {
		return PurgeResult{}, err
	}
	l.compactRecords(op.prevFirst, op.cutTo, op.t, name)
	return PurgeResult{First: op.prevFirst, Next: op.cutTo, Records: op.cutTo - op.prevFirst}, nil
}

// DeleteTopic removes a topic: its records, its retention state and
// configuration, every named position of it (consumer positions and mirror
// cursors) and every consumer group's state of it, in one synced batch. A topic of the same name created
// later starts at offset 0 with a new topic ID. Readers of the deleted topic
// get a *TopicDeletedError. It returns how many records were deleted.
func (l *Log) DeleteTopic(ctx context.Context, name string) (uint64, error) {
	op := &adminOp{kind: opDelete}
	if err := l.submitAdmin(ctx, name, op); err != nil {
		return 0, err
	}
	l.compactRecords(0, math.MaxUint64, op.gone, name)
	return op.goneRecs, nil
}

// compactRecords compacts the deleted record range [from, to) of t to
// reclaim its space now rather than when Pebble gets to it. A failure only
// costs space: it is logged.
func (l *Log) compactRecords(from, to uint64, t *topic, name string) {
	if t == nil || to <= from {
		return
	}
	db, err := l.readDB()
	if err != nil {
		return
	}
	defer l.db.RUnlock()
	if err := db.Compact(l.ctx, recordKey(t.id, from), recordKey(t.id, to), false); err != nil && l.ctx.Err() == nil {
		l.log.Warn("compaction of deleted records failed: the space is reclaimed later", "topic", name, "err", err)
	}
}

// submitAdmin queues op for topic and waits for it; the context works as for
// Append.
func (l *Log) submitAdmin(ctx context.Context, topic string, op *adminOp) error {
	if err := checkName("topic", topic); err != nil {
		return fmt.Errorf("wal: %s %q: %w", op.kind, topic, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wal: %s %q: %w", op.kind, topic, err)
	}
	if err := l.refuseReplicatedAdmin(topic, op); err != nil { // replicated.go
		return fmt.Errorf("wal: %s %q: %w", op.kind, topic, err)
	}
	ch := make(chan AppendResult, 1)
	r := &request{topic: topic, admin: op, done: func(res AppendResult) { ch <- res }}
	return l.await(ctx, r, ch).Err
}

// commitAdmin runs one admin request alone. Committer goroutine.
func (l *Log) commitAdmin(r *request) {
	if !r.state.CompareAndSwap(stateQueued, stateTaken) {
		return // withdrawn: no callback
	}
	op := r.admin
	f := &inflight{reqs: []*request{r}, admin: op}
	if op.kind == opMark {
		l.markLocked(op) // clockmark.go: nothing written; completed after every batch before it
		l.inflight <- f
		return
	}
	if op.kind == opPurge || op.kind == opDelete {
		l.drain()
		if p := l.failed.Load(); p != nil {
			r.res.Err = r.wrap(fmt.Errorf("%w: %w", ErrFailed, *p))
			l.inflight <- f
			return
		}
	}
	if op.kind == opPurge || op.kind == opDelete {
		// The groups' states of the topic are rewritten or removed in this batch: no
		// SetGroup may write one between the pass that finds them and the apply.
		l.groupMu.Lock()
		defer l.groupMu.Unlock()
	}
	b := l.pdb.NewBatch()
	if err := l.buildAdmin(b, r.topic, op, f); err != nil {
		r.res.Err = r.wrap(err)
	}
	if r.res.Err != nil || b.Empty() {
		_ = b.Close()
		l.inflight <- f
		return
	}
	op.applied = true
	f.start = time.Now()
	apply := func() {
		if err := l.pdb.ApplyNoSyncWait(b, pebble.Sync); err != nil {
			l.fail(err)
			f.err = fmt.Errorf("%w: %w", ErrFailed, err)
		} else {
			f.batch = b
		}
	}
	if h := l.opts.testHooks; h != nil && h.adminApply != nil {
		h.adminApply(apply)
	} else {
		apply()
	}
	l.inflight <- f
}

// drain waits until the completer has completed every batch handed to it so
// far: then every topic's high-watermark is its next offset. Committer.
func (l *Log) drain() {
	ch := make(chan struct{})
	l.inflight <- &inflight{barrier: ch}
	<-ch
}

// buildAdmin writes op's batch and moves what readers must see before Pebble
// shows the batch (first offsets, deleted topics). Committer goroutine.
func (l *Log) buildAdmin(b *pebble.Batch, name string, op *adminOp, f *inflight) error {
	t := l.committerTopic(name)
	switch op.kind {
	case opCreate, opConfigure:
		return l.buildConfigure(b, name, t, op, f)
	case opPositions:
		now := l.opts.Now().UnixNano()
		for i := range op.positions {
			p := &op.positions[i]
			if !p.del && l.deletedLocked(p.key.topic) {
				return &TopicDeletedError{Topic: p.key.topic}
			}
			if p.del {
				_ = b.Delete(positionKey(p.key.topic, p.key.name), nil)
			} else {
				p.val.updated = now
				putPosition(b, p.key.topic, p.key.name, p.val)
			}
		}
		f.positions = op.positions
		return nil
	}
	if t == nil {
		if op.kind == opRetain {
			return nil // deleted since the pass looked
		}
		l.mu.RLock()
		defer l.mu.RUnlock()
		return l.goneLocked(name)
	}
	l.mu.RLock()
	first, firstPos, hwm := t.first, t.firstPos, t.hwm
	l.mu.RUnlock()
	op.prevFirst, op.prevPos = first, firstPos
	switch op.kind {
	case opRetain:
		if op.t != t || op.cut <= first {
			return nil // another generation of the name, or purged meanwhile
		}
		return l.cutLocked(b, t, op, op.cut, op.cutPos)
	case opPurge:
		if hwm != t.next { // cannot happen after a drain without a failure: refuse rather than cut past durable records
			return fmt.Errorf("%w: high-watermark %d below next offset %d after the drain", ErrFailed, hwm, t.next)
		}
		if err := l.groupsOfTopicInto(b, name, false, max(t.next, first)); err != nil {
			return fmt.Errorf("move group floors: %w", err)
		}
		if t.next <= first {
			op.cutTo, op.cutToPos = first, firstPos
			return nil // empty already
		}
		op.t = t
		return l.cutLocked(b, t, op, t.next, t.nextPos)
	case opDelete:
		return l.buildDelete(b, name, t, op)
	}
	return fmt.Errorf("%w: unknown operation", ErrInvalidRequest)
}

// buildConfigure writes into b the creation of topic name (t nil) or a change of its
// configuration.
func (l *Log) buildConfigure(b *pebble.Batch, name string, t *topic, op *adminOp, f *inflight) error {
	if t == nil {
		var err error
		if t, err = l.newLocalTopic(b, name); err != nil { // replicated.go
			return err
		}
		putNextID(b, l.nextTopicID())
		op.created = t
		f.newTopics = append(f.newTopics, t)
	} else if t.ccfg == op.cfg {
		return nil // nothing to write
	} else if op.kind == opCreate {
		return &TopicExistsError{Topic: name, Config: t.ccfg}
	}
	t.ccfg = op.cfg
	k := configKey(t.id)
	if op.cfg == (TopicConfig{}) {
		_ = b.Delete(k, nil)
	} else {
		_ = b.Set(k, sealMeta(k, encodeConfig(op.cfg)), nil)
	}
	op.t = t
	return nil
}

// buildDelete writes into b the deletion of topic t: its records, metadata, positions and
// group states; readers stop seeing it before Pebble shows the deletion.
func (l *Log) buildDelete(b *pebble.Batch, name string, t *topic, op *adminOp) error {
	if err := l.groupsOfTopicInto(b, name, true, 0); err != nil {
		return fmt.Errorf("remove group states: %w", err)
	}
	if err := l.dropCloseMark(name); err != nil {
		return fmt.Errorf("rewrite %s: %w", closeMarkFile, err)
	}
	_ = b.DeleteRange(recordKey(t.id, 0), recordKey(t.id, math.MaxUint64), nil)
	_ = b.Delete(topicKey(name), nil)
	_ = b.Delete(retentionKey(t.id), nil)
	_ = b.Delete(configKey(t.id), nil)
	pp := positionTopicPrefix(name)
	_ = b.DeleteRange(pp, prefixEnd(pp), nil)
	for _, p := range t.producers {
		l.c.dedup.drop(p)
	}
	l.forgetLocal(name)
	l.c.deleted[name] = struct{}{}
	op.gone = t
	// Readers stop seeing the topic before Pebble shows the deletion.
	l.mu.Lock()
	op.goneBytes, op.goneRecs = t.hwmPos-t.firstPos, t.hwm-t.first
	delete(l.mu.topics, name)
	l.mu.deleted[name] = t.id
	t.deleted = true
	l.mu.Unlock()
	return nil
}

// cutLocked deletes t's records below cut and stores the new first offset in
// b, moving the first offset readers see before the batch is applied: Pebble
// shows the deletion to readers before the commit is durable, and a reader
// must then get OffsetOutOfRange, not a missing durable record. If the commit
// fails, the first offset stays moved (safe either way: the log refuses
// further appends) and Open recovers it from what is stored. Committer.
func (l *Log) cutLocked(b *pebble.Batch, t *topic, op *adminOp, cut, cutPos uint64) error {
	_ = b.DeleteRange(recordKey(t.id, 0), recordKey(t.id, cut), nil)
	rk := retentionKey(t.id)
	st := binary.LittleEndian.AppendUint64(nil, cut)
	st = binary.LittleEndian.AppendUint64(st, cutPos)
	_ = b.Set(rk, sealMeta(rk, st), nil)
	op.cutTo, op.cutToPos = cut, cutPos
	l.mu.Lock()
	t.first, t.firstPos = cut, cutPos
	l.mu.Unlock()
	return nil
}

// newTopic hands out the next topic ID to a new topic and writes its name
// into b; the caller stores the counter (putNextID) in the same batch.
// Committer goroutine.
func (l *Log) newTopic(b *pebble.Batch, name string) (*topic, error) {
	if l.c.nextID == math.MaxUint32 {
		return nil, fmt.Errorf("%w: every topic ID was used once (%d)", ErrInvalidRequest, uint64(math.MaxUint32))
	}
	t := &topic{name: name, id: l.c.nextID, dedupReady: true}
	l.c.nextID++
	delete(l.c.deleted, name)
	k := topicKey(name)
	_ = b.Set(k, sealMeta(k, binary.BigEndian.AppendUint32(nil, t.id)), nil)
	return t, nil
}

func putNextID(b *pebble.Batch, next uint32) {
	_ = b.Set(nextIDKey, sealMeta(nextIDKey, binary.BigEndian.AppendUint32(nil, next)), nil)
}

// deletedLocked reports whether topic was deleted since Open and not created
// again. Committer goroutine.
func (l *Log) deletedLocked(topic string) bool {
	_, gone := l.c.deleted[topic]
	return gone && l.committerTopic(topic) == nil
}

// goneLocked explains a topic that readers do not see: deleted since Open, or
// unknown. The caller holds l.mu.
func (l *Log) goneLocked(name string) error {
	if _, ok := l.mu.deleted[name]; ok {
		return &TopicDeletedError{Topic: name}
	}
	return ErrUnknownTopic
}

// publishAdminLocked makes a durable admin batch visible. Completer, with
// l.mu held.
func (l *Log) publishAdminLocked(op *adminOp) {
	if !op.applied {
		return
	}
	switch op.kind {
	case opCreate, opConfigure:
		if op.t != nil {
			op.t.cfg = op.cfg
		}
	case opDelete:
		for _, name := range l.mu.positions.namesOn(op.gone.name) {
			l.deletePositionLocked(posName{name: name, topic: op.gone.name})
		}
	}
}

// afterAdmin updates metrics and wakes readers after a durable admin batch.
// Completer goroutine.
func (l *Log) afterAdmin(op *adminOp) {
	if !op.applied {
		return
	}
	switch op.kind {
	case opCreate, opConfigure:
		if op.created != nil {
			l.m.topics.Inc()
			l.watch.wake(nil, true)
		}
	case opRetain, opPurge:
		if op.cutTo > op.prevFirst {
			l.m.logBytes.Sub(float64(op.cutToPos - op.prevPos))
			if op.kind == opRetain {
				l.m.retentionDeleted.Add(float64(op.cutTo - op.prevFirst))
			}
			l.log.Debug(string(op.kind), "topic", op.t.name, "first", op.cutTo, "deleted", op.cutTo-op.prevFirst)
		}
		if op.kind == opPurge {
			l.watch.wakeTopic(op.t.name, op.t.id) // readers behind the cut learn of it now
		}
	case opDelete:
		l.m.topics.Dec()
		l.m.logBytes.Sub(float64(op.goneBytes))
		l.log.Info("topic deleted", "topic", op.gone.name, "id", op.gone.id, "records", op.goneRecs)
		l.watch.wakeTopic(op.gone.name, op.gone.id)
	}
}

// recoverNextID loads the topic ID counter; Open already set nextID to the
// highest stored ID + 1.
func (l *Log) recoverNextID() error {
	switch val, closer, err := l.pdb.Get(nextIDKey); {
	case errors.Is(err, pebble.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("wal: recover topic ID counter: %w", err)
	default:
		defer closer.Close()
		p, reason := openMeta(nextIDKey, val, 4)
		if reason != "" {
			return &CorruptError{Reason: "topic ID counter: " + reason}
		}
		l.c.nextID = max(l.c.nextID, binary.BigEndian.Uint32(p))
		return nil
	}
}

// recoverConfig loads t's stored configuration, if any.
func (l *Log) recoverConfig(t *topic) error {
	k := configKey(t.id)
	switch val, closer, err := l.pdb.Get(k); {
	case errors.Is(err, pebble.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("wal: recover config of %q: %w", t.name, err)
	default:
		defer closer.Close()
		p, reason := openMeta(k, val, configLen)
		if reason == "" {
			t.cfg, reason = decodeConfig(p)
		}
		if reason != "" {
			return &CorruptError{Topic: t.name, Reason: "topic config: " + reason}
		}
		t.ccfg = t.cfg
		return nil
	}
}
