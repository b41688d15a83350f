package wal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Position is a named uint64 (a durable consumer position, a mirror cursor)
// for a topic. It is written alone (SetPosition) or in the same synced batch
// as an append's records (AppendRequest.Position).
type Position struct {
	Name  string
	Topic string
	Value uint64
	// Vector, if not empty, is stored with the position (position.go, v3): per
	// origin region, the last origin offset it covers. At most 256 regions.
	Vector map[string]uint64
}

// AppendRequest is one atomic append: its records get consecutive offsets and
// become durable, with its position, in one synced commit. Records that
// repeat a stored (topic, producer, sequence), or whose sequence is too old to
// tell, are left out (AppendResult.Skipped); the others are still appended
// together.
type AppendRequest struct {
	// Topic is validated by the caller (routing); the log only checks that
	// it is non-empty and at most MaxNameLen bytes. It may be "" when
	// Records is empty and Position is set.
	Topic string
	// Records are encoded by the committer: the caller must not modify them
	// until the append completed. Offset and Time are assigned by the log
	// (and OriginOffset = Offset when OriginRegion is ""); the caller's
	// values of these fields are ignored and its slice is not written to.
	Records []Record
	// Position, if set, is stored atomically with the records (mirror
	// cursor, I7).
	Position *Position
}

// AppendResult reports an append: the offsets First..First+Count-1 and the
// Time of its records, or Err. For a request without records, First is the
// topic's next offset (0 when Topic is "" or new).
//
// Records with a producer (see dedup.go) may be skipped: Skipped lists them
// (nil when every record was appended), and the other records, in request
// order, got the offsets First..First+Count-1. Without skips Count is
// len(Records).
type AppendResult struct {
	First   uint64
	Count   int
	Time    int64 // of the last record (all records of a request share it)
	Err     error
	Skipped []Skipped // duplicates and refused sequences, by increasing Index
}

// RecordOutcome is what happened to one record of an append request.
type RecordOutcome struct {
	Offset    uint64 // where it is stored (a duplicate: where the earlier copy is)
	Time      int64
	Duplicate bool  // not appended: the same (producer, sequence) is stored at Offset
	Err       error // refused (a *SequenceError): not stored
}

// Outcome returns what happened to record i of a request whose result has no
// Err. Call it for i = 0, 1, 2, ... in order with the same *skip, which
// starts at 0 (it walks Skipped along).
func (r *AppendResult) Outcome(i int, skip *int) RecordOutcome {
	if k := *skip; k < len(r.Skipped) && r.Skipped[k].Index == i {
		*skip = k + 1
		s := &r.Skipped[k]
		return RecordOutcome{Offset: s.Offset, Time: s.Time, Duplicate: s.Err == nil, Err: s.Err}
	}
	return RecordOutcome{Offset: r.First + uint64(i-*skip), Time: r.Time}
}

// Request states: the committer takes a queued request; Append cancels one
// that is still queued when its context ends.
const (
	stateQueued int32 = iota
	stateTaken
	stateCancelled
)

type request struct {
	topic   string
	records []Record
	pos     Position
	hasPos  bool
	size    int      // stored bytes of the records: keys and encoded values
	dedup   bool     // some record has a producer: the committer checks them (dedup.go)
	admin   *adminOp // a topic or position operation (topics_admin.go): committed alone
	done    func(AppendResult)
	state   atomic.Int32
	res     AppendResult // written by the committer or completer before done
}

func (r *request) wrap(err error) error {
	if r.admin != nil {
		return fmt.Errorf("wal: %s %q: %w", r.admin.kind, r.topic, err)
	}
	if len(r.records) == 0 && r.hasPos {
		return fmt.Errorf("wal: set position %q of %q: %w", r.pos.Name, r.pos.Topic, err)
	}
	return fmt.Errorf("wal: append %q: %w", r.topic, err)
}

// inflight is one batch between the committer and the completer.
type inflight struct {
	batch     *pebble.Batch // nil when the batch was not applied
	err       error         // set when the batch failed before its sync
	reqs      []*request
	advances  []advance
	newTopics []*topic
	positions []posWrite
	admin     *adminOp      // the operation of an admin batch, published by the completer
	barrier   chan struct{} // closed by the completer when it reaches it (drain)
	records   int
	bytes     int
	start     time.Time
}

// advance is where a topic's high-watermark goes once the batch is durable.
type advance struct {
	t          *topic
	hwm, hwmPs uint64
	local      bool // records first published in this region among them (WatchAdvances)
}

// Append appends req and blocks until it is durable (its synced commit
// returned) or failed. If ctx ends first: while the request is still queued
// it is withdrawn and the error wraps ctx.Err(); once the committer has taken
// it the error wraps ErrOutcomeUnknown and ctx.Err(), and the records may
// still become durable.
func (l *Log) Append(ctx context.Context, req AppendRequest) AppendResult {
	if err := ctx.Err(); err != nil {
		return AppendResult{Err: fmt.Errorf("wal: append %q: %w", req.Topic, err)}
	}
	ch := make(chan AppendResult, 1)
	r, err := l.newRequest(req, func(res AppendResult) { ch <- res })
	if err != nil {
		return AppendResult{Err: err}
	}
	if r.dedup {
		l.awaitRebuild(r.topic)
	}
	return l.await(ctx, r, ch)
}

// await queues r and waits for its result on ch (r.done sends to it), or for
// ctx: a request still queued is withdrawn; one the committer took may still
// become durable (ErrOutcomeUnknown).
func (l *Log) await(ctx context.Context, r *request, ch <-chan AppendResult) AppendResult {
	if err := l.enqueue(r); err != nil {
		return AppendResult{Err: r.wrap(err)}
	}
	select {
	case res := <-ch:
		return res
	case <-ctx.Done():
		if r.state.CompareAndSwap(stateQueued, stateCancelled) {
			return AppendResult{Err: r.wrap(ctx.Err())}
		}
		return AppendResult{Err: r.wrap(fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err()))}
	}
}

// AppendAsync queues req and returns without waiting for the fsync (the first
// request with a producer to a topic recovered at Open waits, once, for the
// read of the topic's tail that rebuilds its de-duplication state). done is
// called once, from the completer goroutine, after the synced commit (or the
// failure), in submission order for all requests (so also per topic); it
// must not block. A request refused at once (invalid, or the log is closed)
// gets done called before AppendAsync returns, so its callback can come
// before those of earlier requests still in flight.
func (l *Log) AppendAsync(req AppendRequest, done func(AppendResult)) {
	r, err := l.newRequest(req, done)
	if err != nil {
		done(AppendResult{Err: err})
		return
	}
	if r.dedup {
		l.awaitRebuild(r.topic)
	}
	if err := l.enqueue(r); err != nil {
		done(AppendResult{Err: r.wrap(err)})
	}
}

// newRequest validates req on the caller's goroutine, so that the committer
// only assigns offsets and copies bytes.
func (l *Log) newRequest(req AppendRequest, done func(AppendResult)) (*request, error) {
	r := &request{topic: req.Topic, records: req.Records, done: done}
	if req.Position != nil {
		r.pos, r.hasPos = *req.Position, true
		if err := checkName("position name", r.pos.Name); err != nil {
			return nil, r.wrap(err)
		}
		if err := checkName("position topic", r.pos.Topic); err != nil {
			return nil, r.wrap(err)
		}
		if err := checkVector(r.pos.Vector); err != nil { // position.go
			return nil, r.wrap(err)
		}
		r.pos.Vector = maps.Clone(r.pos.Vector) // the caller may reuse its map
	}
	switch {
	case len(r.records) == 0 && !r.hasPos:
		return nil, r.wrap(fmt.Errorf("%w: nothing to append", ErrInvalidRequest))
	case len(r.records) > 0 || r.topic != "":
		if err := checkName("topic", r.topic); err != nil {
			return nil, r.wrap(err)
		}
	}
	if len(r.records) > l.opts.MaxBatchRecords {
		return nil, r.wrap(fmt.Errorf("%w: %d records, at most %d per commit",
			ErrTooLarge, len(r.records), l.opts.MaxBatchRecords))
	}
	if err := errors.Join(l.refuseReplicated(r.topic), l.refuseReplicated(r.pos.Topic)); err != nil { // replicated.go
		return nil, r.wrap(err)
	}
	dedupOn := l.opts.DedupWindow > 0
	for i := range r.records {
		r.size += recordKeyLen + encodedLen(&r.records[i])
		if dedupOn && dedupKeyed(&r.records[i]) {
			r.dedup = true
		}
	}
	if r.size > l.opts.MaxBatchBytes {
		return nil, r.wrap(fmt.Errorf("%w: %d bytes, at most %d per commit",
			ErrTooLarge, r.size, l.opts.MaxBatchBytes))
	}
	return r, nil
}

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidRequest, what)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %s of %d bytes, at most %d", ErrInvalidRequest, what, len(name), MaxNameLen)
	}
	return nil
}

func (l *Log) enqueue(r *request) error {
	l.q.Lock()
	if l.q.closed {
		l.q.Unlock()
		return ErrClosed
	}
	l.q.reqs = append(l.q.reqs, r)
	first := len(l.q.reqs) == 1
	l.q.Unlock()
	if first {
		l.signal()
	}
	return nil
}

func (l *Log) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// commitLoop is the committer goroutine. It owns offset assignment (l.c and
// the committer fields of every topic) and is the only goroutine that
// applies appends to Pebble, so Pebble's WAL order is offset order.
func (l *Log) commitLoop() {
	defer l.wg.Done()
	defer close(l.inflight)
	for {
		reqs, closed := l.take()
		l.commitAll(reqs, closed)
		if closed {
			return
		}
	}
}

// take waits for queued requests (or Close) and takes all of them.
func (l *Log) take() ([]*request, bool) {
	for {
		l.q.Lock()
		if len(l.q.reqs) > 0 || l.q.closed {
			reqs, closed := l.q.reqs, l.q.closed
			l.q.reqs = nil
			l.q.Unlock()
			return reqs, closed
		}
		l.q.Unlock()
		<-l.wake
	}
}

// commitAll cuts reqs into batches bounded by MaxBatchRecords/MaxBatchBytes
// and applies each. After Close or a failure, the rest go to the completer
// as failed, so that callbacks still run in submission order.
func (l *Log) commitAll(reqs []*request, closed bool) {
	for i := 0; i < len(reqs); {
		var err error
		if closed {
			err = ErrClosed
		} else if p := l.failed.Load(); p != nil {
			err = fmt.Errorf("%w: %w", ErrFailed, *p)
		}
		if err != nil {
			l.inflight <- &inflight{err: err, reqs: reqs[i:]}
			return
		}
		if reqs[i].admin != nil {
			l.commitAdmin(reqs[i])
			i++
			continue
		}
		j, nrec, nbytes := i, 0, 0
		for ; j < len(reqs); j++ {
			r := reqs[j]
			if r.admin != nil {
				break // committed alone, after this batch
			}
			if j > i && (nrec+len(r.records) > l.opts.MaxBatchRecords || nbytes+r.size > l.opts.MaxBatchBytes) {
				break
			}
			nrec += len(r.records)
			nbytes += r.size
		}
		l.commitBatch(reqs[i:j], nrec, nbytes)
		i = j
	}
}

// commitBatch assigns offsets and times, builds one Pebble batch, applies it
// with a synced commit without waiting for the fsync, and hands it to the
// completer. Long by design: it is the committer's one step, and offset
// assignment, de-duplication and the batch's order in Pebble's WAL (I2) are
// kept in the one function that the ordering argument is made about.
func (l *Log) commitBatch(reqs []*request, nrec, nbytes int) {
	f := &inflight{reqs: reqs}
	b := l.pdb.NewBatchWithSize(nbytes + 8*nrec + 256*len(reqs) + 64)
	now := max(l.opts.Now().UnixNano(), l.clockFloor.Load()) // clockmark.go
	touched := l.c.slab[:0]
	dedupUsed := false
	newID := false
	for _, r := range reqs {
		if !r.state.CompareAndSwap(stateQueued, stateTaken) {
			continue // withdrawn by Append: no offsets, no callback
		}
		if r.hasPos && !(len(r.records) > 0 && r.topic == r.pos.Topic) && l.deletedLocked(r.pos.Topic) {
			// A late ACK of a subscription to a topic deleted since: it must
			// not leave a position behind for a later topic of the same name.
			r.res = AppendResult{Err: r.wrap(&TopicDeletedError{Topic: r.pos.Topic})}
			continue
		}
		if len(r.records) > 0 {
			t := l.committerTopic(r.topic)
			if t == nil {
				var err error
				if t, err = l.newLocalTopic(b, r.topic); err != nil { // replicated.go
					r.res = AppendResult{Err: r.wrap(err)}
					continue
				}
				newID = true
				f.newTopics = append(f.newTopics, t)
			}
			if !t.touched {
				t.touched = true
				touched = append(touched, t)
			}
			ts := max(now, t.lastTime)
			t.lastTime = ts
			l.c.lastStamp = max(l.c.lastStamp, ts)
			r.res = AppendResult{First: t.next, Count: len(r.records), Time: ts}
			if r.dedup {
				dedupUsed = true
				if !t.dedupReady {
					l.rebuildDedup(t, now)
				}
			}
			skippedBytes := 0
			for i := range r.records {
				rec := &r.records[i]
				n := encodedLen(rec)
				if r.dedup && dedupKeyed(rec) {
					if sk, skip := l.dedupCheck(t, rec, t.next, ts, now); skip {
						sk.Index = i
						r.res.Skipped = append(r.res.Skipped, sk)
						r.res.Count--
						skippedBytes += recordKeyLen + n
						continue
					}
				}
				if rec.OriginRegion == "" {
					t.stagedLocal = true
				}
				op := b.SetDeferred(recordKeyLen, n)
				putRecordKey(op.Key, t.id, t.next)
				encodeRecord(op.Value, op.Key, rec, ts, t.nextPos)
				_ = op.Finish()
				t.next++
				t.nextPos += uint64(recordKeyLen + n)
			}
			f.records += r.res.Count
			f.bytes += r.size - skippedBytes
		} else if t := l.committerTopic(r.topic); t != nil {
			r.res.First = t.next
		}
		if r.hasPos {
			f.positions = append(f.positions, putPosition(b, r.pos.Topic, r.pos.Name, posValue{v: r.pos.Value, updated: now, vec: r.pos.Vector}))
		}
	}
	if newID {
		putNextID(b, l.nextTopicID())
	}
	if dedupUsed {
		l.c.dedup.trim(now)
		l.m.dedupProducers.Set(float64(l.c.dedup.producers))
		l.m.dedupEntries.Set(float64(l.c.dedup.entries))
		l.stats.dedupStates.Store(int64(l.c.dedup.producers))
		l.stats.dedupEntries.Store(int64(l.c.dedup.entries))
	}
	for _, t := range touched {
		f.advances = append(f.advances, advance{t: t, hwm: t.next, hwmPs: t.nextPos, local: t.stagedLocal})
		t.touched, t.stagedLocal = false, false
	}
	clear(touched)
	l.c.slab = touched[:0]
	if b.Empty() {
		_ = b.Close()
		l.inflight <- f
		return
	}
	f.start = time.Now()
	if h := l.opts.testHooks; h != nil && h.ackBeforeSync {
		err := l.pdb.Apply(b, pebble.NoSync)
		_ = b.Close()
		if err != nil {
			l.fail(err)
			f.err = fmt.Errorf("%w: %w", ErrFailed, err)
		}
	} else if err := l.pdb.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		// Pebble's pipeline state is unknown: do not reuse or close the batch.
		l.fail(err)
		f.err = fmt.Errorf("%w: %w", ErrFailed, err)
	} else {
		f.batch = b
	}
	if h := l.opts.testHooks; h != nil && h.afterApply != nil {
		h.afterApply()
	}
	l.inflight <- f
}

// fail records the first commit failure; from then on every append fails.
func (l *Log) fail(err error) {
	if l.failed.CompareAndSwap(nil, &err) {
		l.m.commitErrors.Inc()
		l.log.Error("synced commit failed: refusing further appends until reopened", "err", err)
	}
}

// completeLoop is the completer goroutine: it takes batches in commit order,
// waits for each one's sync and only then publishes it (high-watermarks,
// new topics, positions, watchers, callbacks).
func (l *Log) completeLoop() {
	defer l.wg.Done()
	for f := range l.inflight {
		l.complete(f)
	}
}

func (l *Log) complete(f *inflight) {
	if f.barrier != nil {
		close(f.barrier)
		return
	}
	err := f.err
	if f.batch != nil {
		if h := l.opts.testHooks; h != nil && h.beforeSyncWait != nil {
			h.beforeSyncWait()
		}
		serr := f.batch.SyncWait()
		if serr == nil {
			l.m.fsyncSeconds.Observe(time.Since(f.start).Seconds())
		}
		_ = f.batch.Close()
		if serr != nil {
			l.fail(serr)
			err = fmt.Errorf("%w: %w", ErrFailed, serr)
		}
	}
	if err == nil {
		// A batch applied after a failed one may report a successful sync,
		// but what it follows in the WAL is unknown: fail it too.
		if p := l.failed.Load(); p != nil {
			err = fmt.Errorf("%w: %w", ErrFailed, *p)
		}
	}
	if err != nil {
		for _, r := range f.reqs {
			if r.state.Load() != stateCancelled {
				r.res = AppendResult{Err: r.wrap(err)}
			}
		}
	} else {
		l.publish(f)
	}
	for _, r := range f.reqs {
		if r.state.Load() != stateCancelled {
			r.done(r.res)
		}
	}
}

// publish makes a durable batch visible: high-watermarks, new topics,
// positions, then wakes watchers.
func (l *Log) publish(f *inflight) {
	l.mu.Lock()
	for _, t := range f.newTopics {
		l.mu.topics[t.name] = t
		l.createdLocked(t.name)
		delete(l.mu.deleted, t.name)
	}
	for _, a := range f.advances {
		from := a.t.hwm
		a.t.hwm, a.t.hwmPos = a.hwm, a.hwmPs
		l.advanceLocked(a.t, from, a.local)
	}
	for _, p := range f.positions {
		if p.del {
			l.deletePositionLocked(p.key)
		} else {
			l.setPositionLocked(p.key, p.val)
		}
	}
	if f.admin != nil {
		l.publishAdminLocked(f.admin)
	}
	l.mu.Unlock()
	if len(f.newTopics) > 0 {
		l.localDurable(f.newTopics)
	}
	if f.admin != nil {
		l.afterAdmin(f.admin)
		return
	}

	appended := 0
	for _, r := range f.reqs {
		if r.state.Load() != stateCancelled {
			appended++
		}
	}
	l.stats.appends.Add(uint64(appended))
	if f.batch != nil {
		l.stats.commits.Add(1)
		l.m.recordsPerCommit.Observe(float64(f.records))
	}
	l.stats.records.Add(uint64(f.records))
	l.stats.bytes.Add(uint64(f.bytes))
	l.m.appendedRecords.Add(float64(f.records))
	l.m.appendedBytes.Add(float64(f.bytes))
	l.m.logBytes.Add(float64(f.bytes))
	if len(f.newTopics) > 0 {
		l.m.topics.Add(float64(len(f.newTopics)))
	}
	l.watch.wake(f.advances, len(f.newTopics) > 0)
}
