package wal

import (
	"context"
	"encoding/binary"
	"fmt"
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
}

// AppendRequest is one atomic append: its records get consecutive offsets and
// become durable, with its position, in one synced commit.
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
type AppendResult struct {
	First uint64
	Count int
	Time  int64 // of the last record (all records of a request share it)
	Err   error
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
	size    int // stored bytes of the records: keys and encoded values
	done    func(AppendResult)
	state   atomic.Int32
	res     AppendResult // written by the committer or completer before done
}

func (r *request) wrap(err error) error {
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
	positions []Position
	records   int
	bytes     int
	start     time.Time
}

// advance is where a topic's high-watermark goes once the batch is durable.
type advance struct {
	t          *topic
	hwm, hwmPs uint64
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

// AppendAsync queues req and returns without waiting for the fsync. done is
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
	for i := range r.records {
		r.size += recordKeyLen + encodedLen(&r.records[i])
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
		j, nrec, nbytes := i, 0, 0
		for ; j < len(reqs); j++ {
			r := reqs[j]
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
// completer.
func (l *Log) commitBatch(reqs []*request, nrec, nbytes int) {
	f := &inflight{reqs: reqs}
	b := l.pdb.NewBatchWithSize(nbytes + 8*nrec + 256*len(reqs) + 64)
	now := l.opts.Now().UnixNano()
	touched := l.c.slab[:0]
	for _, r := range reqs {
		if !r.state.CompareAndSwap(stateQueued, stateTaken) {
			continue // withdrawn by Append: no offsets, no callback
		}
		if len(r.records) > 0 {
			t := l.c.topics[r.topic]
			if t == nil {
				t = &topic{name: r.topic, id: l.c.nextID}
				l.c.nextID++
				l.c.topics[t.name] = t
				k := topicKey(t.name)
				_ = b.Set(k, sealMeta(k, binary.BigEndian.AppendUint32(nil, t.id)), nil)
				f.newTopics = append(f.newTopics, t)
			}
			if !t.touched {
				t.touched = true
				touched = append(touched, t)
			}
			ts := max(now, t.lastTime)
			t.lastTime = ts
			r.res = AppendResult{First: t.next, Count: len(r.records), Time: ts}
			for i := range r.records {
				rec := &r.records[i]
				n := encodedLen(rec)
				op := b.SetDeferred(recordKeyLen, n)
				putRecordKey(op.Key, t.id, t.next)
				encodeRecord(op.Value, op.Key, rec, ts, t.nextPos)
				_ = op.Finish()
				t.next++
				t.nextPos += uint64(recordKeyLen + n)
			}
			f.records += len(r.records)
			f.bytes += r.size
		} else if t := l.c.topics[r.topic]; t != nil {
			r.res.First = t.next
		}
		if r.hasPos {
			k := positionKey(r.pos.Topic, r.pos.Name)
			_ = b.Set(k, sealMeta(k, binary.LittleEndian.AppendUint64(nil, r.pos.Value)), nil)
			f.positions = append(f.positions, r.pos)
		}
	}
	for _, t := range touched {
		t.touched = false
		f.advances = append(f.advances, advance{t: t, hwm: t.next, hwmPs: t.nextPos})
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
	for _, a := range f.advances {
		a.t.hwm, a.t.hwmPos = a.hwm, a.hwmPs
	}
	for _, t := range f.newTopics {
		l.mu.topics[t.name] = t
	}
	for _, p := range f.positions {
		l.mu.positions[posName{name: p.Name, topic: p.Topic}] = p.Value
	}
	l.mu.Unlock()

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
