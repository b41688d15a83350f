package wal

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Idempotent publish: a record that carries a ProducerID and a Sequence > 0,
// published in this region (OriginRegion ""), is stored at most once per
// (topic, ProducerID, Sequence). A retry of a publish whose outcome the client
// could not learn (its connection dropped, the node restarted after the fsync
// but before the ack reached the client) is then answered with the offset and
// time of the record stored by the first attempt instead of being stored
// again.
//
// The check lives where offsets are assigned: the committer goroutine owns
// every producer state below (no lock), and checks each record before it
// gets an offset, so two copies of one publish in one batch, or racing on two
// connections, are stored once. A duplicate of a record that is not durable
// yet is answered only when that record is: the completer answers requests in
// commit order.
//
// Per (topic, producer) the committer keeps the last DedupWindow (sequence ->
// offset, time) entries, sorted by sequence, and a floor: the highest
// sequence that was dropped from the window (or that a rebuild after Open
// could not see). A sequence in the window is a duplicate; one above the
// floor that is not in the window was never stored (every stored sequence is
// in the window or at most the floor) and is stored; one at or below the
// floor and not in the window may have been stored and is refused with a
// *SequenceError, never stored and never dropped silently.
//
// Memory is bounded node-wide: producer states are kept in LRU order and the
// least recently used are dropped past DedupMaxProducers states or
// DedupMaxEntries entries, and states idle for DedupIdle are dropped. A
// retry after its producer's state was dropped is stored again.
//
// Nothing new is persisted: after Open, the first publish with a producer to
// a topic that existed at Open reads that topic's tail (at most the last
// DedupRebuildRecords records, and none older than DedupIdle) on its caller's
// goroutine, and the committer fills the windows from it before it checks the
// publish (see awaitRebuild): other topics' appends do not wait for the read.

// Defaults of the de-duplication options.
const (
	DefaultDedupWindow         = 4096
	DefaultDedupMaxProducers   = 65536
	DefaultDedupMaxEntries     = 1 << 20
	DefaultDedupIdle           = 10 * time.Minute
	DefaultDedupRebuildRecords = 64 << 10
)

// ErrSequence is matched (errors.Is) by *SequenceError.
var ErrSequence = errors.New("wal: sequence older than the de-duplication window")

// SequenceError refuses a record whose sequence is older than what the log
// remembers of its producer on the topic: it may have been stored by an
// earlier attempt, and the log cannot tell. Nothing of the request's record
// was stored.
type SequenceError struct {
	Topic      string
	ProducerID string
	Sequence   uint64
	Floor      uint64 // sequences at or below it that are not remembered are refused
	Window     int    // how many sequences per producer and topic the log remembers
}

func (e *SequenceError) Error() string {
	return fmt.Sprintf("wal: sequence %d of producer %q on topic %q is older than the de-duplication window (the last %d publishes, everything above sequence %d); the log cannot tell whether it was stored",
		e.Sequence, e.ProducerID, e.Topic, e.Window, e.Floor)
}

// Is makes errors.Is(err, ErrSequence) true.
func (e *SequenceError) Is(target error) bool { return target == ErrSequence }

// Skipped is a record of an append request that was not appended: a
// duplicate (Err nil; Offset and Time are those of the record stored by the
// earlier attempt), or refused (Err, a *SequenceError).
type Skipped struct {
	Index  int // in AppendRequest.Records
	Offset uint64
	Time   int64
	Err    error
}

// dedupKeyed reports whether rec takes part in de-duplication.
func dedupKeyed(rec *Record) bool {
	return rec.ProducerID != "" && rec.Sequence > 0 && rec.OriginRegion == ""
}

type dedupEntry struct {
	seq, off uint64
	time     int64
}

// producerState is the window of one (topic, producer). Its entries are a
// ring buffer sorted by sequence; it grows as it is used, up to the window.
type producerState struct {
	t       *topic
	id      string
	buf     []dedupEntry
	head, n int
	floor   uint64
	lastUse int64 // unix nanoseconds

	prev, next *producerState // LRU list, most recent at dedup.lru.next
}

func (p *producerState) at(i int) *dedupEntry { return &p.buf[(p.head+i)%len(p.buf)] }

// find returns the index of the first entry with a sequence >= seq, and
// whether it is seq.
func (p *producerState) find(seq uint64) (int, bool) {
	if p.n == 0 || p.at(p.n-1).seq < seq { // the common case: a new, higher sequence
		return p.n, false
	}
	i := sort.Search(p.n, func(i int) bool { return p.at(i).seq >= seq })
	return i, i < p.n && p.at(i).seq == seq
}

// insert adds e at index i (from find), dropping the lowest entry when the
// window is full. It returns the change in the number of entries.
func (p *producerState) insert(i int, e dedupEntry, window int) int {
	grew := 1
	if p.n == window {
		if i == 0 { // older than everything remembered: remember only that it may exist
			p.floor = max(p.floor, e.seq)
			return 0
		}
		p.floor = max(p.floor, p.at(0).seq)
		p.head = (p.head + 1) % len(p.buf)
		p.n--
		i--
		grew = 0
	}
	if p.n == len(p.buf) {
		nb := make([]dedupEntry, min(max(2*len(p.buf), 4), window))
		for j := range p.n {
			nb[j] = *p.at(j)
		}
		p.buf, p.head = nb, 0
	}
	switch {
	case i == p.n:
	case i == 0:
		p.head = (p.head - 1 + len(p.buf)) % len(p.buf)
	default:
		for j := p.n; j > i; j-- {
			*p.at(j) = *p.at(j - 1)
		}
	}
	p.n++
	*p.at(i) = e
	return grew
}

// dedup is the committer's de-duplication state.
type dedup struct {
	window, maxProducers, maxEntries int
	idle                             int64 // nanoseconds
	producers, entries               int
	lru                              producerState // sentinel of the LRU list
}

func (d *dedup) init(o Options) {
	d.window, d.maxProducers, d.maxEntries = o.DedupWindow, o.DedupMaxProducers, o.DedupMaxEntries
	d.idle = int64(o.DedupIdle)
	d.lru.next, d.lru.prev = &d.lru, &d.lru
}

func (d *dedup) unlink(p *producerState) {
	p.prev.next, p.next.prev = p.next, p.prev
}

func (d *dedup) pushFront(p *producerState) {
	p.prev, p.next = &d.lru, d.lru.next
	d.lru.next.prev = p
	d.lru.next = p
}

func (d *dedup) drop(p *producerState) {
	d.unlink(p)
	delete(p.t.producers, p.id)
	d.producers--
	d.entries -= p.n
}

// trim drops idle states and then the least recently used past the caps.
func (d *dedup) trim(now int64) {
	for p := d.lru.prev; p != &d.lru && now-p.lastUse > d.idle; p = d.lru.prev {
		d.drop(p)
	}
	for p := d.lru.prev; p != &d.lru && (d.producers > d.maxProducers || d.entries > d.maxEntries); p = d.lru.prev {
		d.drop(p)
	}
}

// state returns the state of (t, id), creating it (at the front of the LRU
// list) if needed.
func (d *dedup) state(t *topic, id string, now int64) *producerState {
	p := t.producers[id]
	if p == nil {
		if t.producers == nil {
			t.producers = make(map[string]*producerState)
		}
		p = &producerState{t: t, id: id}
		t.producers[id] = p
		d.producers++
		d.pushFront(p)
	} else if d.lru.next != p {
		d.unlink(p)
		d.pushFront(p)
	}
	p.lastUse = now
	return p
}

// dedupCheck decides about rec, which the committer is about to append to t at
// offset off with time ts: stored (Skipped nil, and the window remembers it
// now), or skipped as a duplicate or a refused sequence.
func (l *Log) dedupCheck(t *topic, rec *Record, off uint64, ts int64, now int64) (Skipped, bool) {
	d := &l.c.dedup
	p := d.state(t, rec.ProducerID, now)
	i, found := p.find(rec.Sequence)
	if found {
		e := p.at(i)
		l.stats.duplicates.Add(1)
		l.m.duplicates.Inc()
		return Skipped{Offset: e.off, Time: e.time}, true
	}
	if rec.Sequence <= p.floor {
		l.stats.refused.Add(1)
		l.m.refused.Inc()
		return Skipped{Err: &SequenceError{Topic: t.name, ProducerID: rec.ProducerID, Sequence: rec.Sequence,
			Floor: p.floor, Window: d.window}}, true
	}
	d.entries += p.insert(i, dedupEntry{seq: rec.Sequence, off: off, time: ts}, d.window)
	return Skipped{}, false
}

// A topic recovered at Open has no windows until its tail is read. The first
// caller that appends a record with a producer to it reads the tail on its own
// goroutine (awaitRebuild), and the committer applies what it found when it
// checks that record (applyRebuild): the committer, which every topic's
// appends go through, never waits on the scan, and the topic's callers wait
// for it only once. This is correct because no record with a producer reaches
// the topic before its scan is done (every such request waits for it in
// newRequest first), so the records appended after the scan's end have no
// producer and change no window. Should the committer meet such a record
// without a scan (a caller that did not wait), it reads the tail itself
// (rebuildDedup), as a fallback.

// tailScan is what the read of a topic's tail found: the records with a
// producer, in offset order, below upTo.
type tailScan struct {
	upTo     uint64
	complete bool // the scan started at the log's first record
	scanned  int
	recs     []scannedRecord
	took     time.Duration
}

type scannedRecord struct {
	producer string
	seq, off uint64
	time     int64
}

// rebuildGate is a recovered topic's tail scan (guarded by its mutex).
// Its pointers come first, so that a topic's (whose pointers also lead, log.go) end early.
type rebuildGate struct {
	running chan struct{} // closed when the scan that runs ends
	scan    *tailScan
	sync.Mutex
	needed bool        // recovered at Open: set before the log is shared, then read-only
	done   atomic.Bool // scan is set, or the windows were rebuilt by the committer
}

// awaitRebuild makes sure the tail of topic name was read before a record with
// a producer is queued for it: the first caller reads it, the others wait.
// Called by Append and AppendAsync on the caller's goroutine.
func (l *Log) awaitRebuild(name string) {
	l.mu.RLock()
	t := l.mu.topics[name]
	var first, upTo uint64
	if t != nil {
		first, upTo = t.first, t.hwm
	}
	l.mu.RUnlock()
	if t == nil || !t.rb.needed || t.rb.done.Load() {
		return
	}
	t.rb.Lock()
	if t.rb.done.Load() {
		t.rb.Unlock()
		return
	}
	if ch := t.rb.running; ch != nil {
		t.rb.Unlock()
		<-ch
		return
	}
	ch := make(chan struct{})
	t.rb.running = ch
	t.rb.Unlock()
	if h := l.opts.testHooks; h != nil && h.beforeTailScan != nil {
		h.beforeTailScan(name)
	}
	var s *tailScan
	if db, err := l.readDB(); err == nil {
		s = l.scanTail(db, t, first, upTo, l.opts.Now().UnixNano())
		l.db.RUnlock()
	}
	t.rb.Lock()
	t.rb.running = nil
	if s != nil {
		t.rb.scan = s
		t.rb.done.Store(true)
	}
	t.rb.Unlock()
	close(ch) // without a scan (the log closed, or Pebble failed) the committer reads the tail
}

// rebuildDedup fills t's windows from the tail of its log, before the first
// record with a producer is checked after Open, with the scan a caller made
// (awaitRebuild) or else reading the tail now. Committer goroutine.
func (l *Log) rebuildDedup(t *topic, now int64) {
	t.dedupReady = true
	t.rb.Lock()
	s := t.rb.scan
	t.rb.scan = nil // applied once; the memory goes
	t.rb.done.Store(true)
	t.rb.Unlock()
	if s == nil {
		l.mu.RLock()
		first := t.first
		l.mu.RUnlock()
		s = l.scanTail(l.pdb, t, first, t.next, now)
	}
	l.applyRebuild(t, s, now)
}

// scanTail reads t's records [max(first, upTo-DedupRebuildRecords), upTo) forward
// (Pebble's fast direction), keeping those with a producer and not older than
// DedupIdle. Records applied but not yet durable are visible to it, as they
// should be (they got offsets). Any goroutine; it touches no committer state.
func (l *Log) scanTail(db *pebble.DB, t *topic, first, upTo uint64, now int64) *tailScan {
	s := &tailScan{upTo: upTo}
	if upTo <= first {
		s.complete = true
		return s
	}
	began := time.Now()
	defer func() { s.took = time.Since(began) }()
	start := first
	if upTo-first > uint64(l.opts.DedupRebuildRecords) {
		start = upTo - uint64(l.opts.DedupRebuildRecords)
	}
	horizon := now - int64(l.opts.DedupIdle)
	it, err := db.NewIter(&pebble.IterOptions{
		LowerBound: recordKey(t.id, start),
		UpperBound: recordKey(t.id, upTo),
	})
	if err != nil {
		l.log.Warn("de-duplication: cannot scan the topic's tail; publishes retried across the restart may be stored twice", "topic", t.name, "err", err)
		return s
	}
	defer it.Close()
	s.complete = start == first
	// A log whose last record is older than the horizon has nothing to remember.
	if it.Last() {
		if tm, _, reason := checkRecord(it.Key(), it.Value()); reason == "" && tm < horizon {
			s.complete = false
			return s
		}
	}
	sl := slab{alias: true} // the payloads are not kept: no copies
	for ok := it.First(); ok; ok = it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			s.complete = false
			break
		}
		rec, reason := decodeRecord(it.Key(), val, &sl)
		s.scanned++
		if reason != "" {
			// What came before may be incomplete.
			_, off, _ := parseRecordKey(it.Key())
			l.log.Warn("de-duplication: skipped an undecodable record in the tail scan", "topic", t.name, "offset", off, "reason", reason)
			s.complete = false
			continue
		}
		if rec.Time < horizon {
			s.complete = false // older sequences of a producer seen later are unknown
			continue
		}
		if dedupKeyed(&rec) {
			s.recs = append(s.recs, scannedRecord{producer: rec.ProducerID, seq: rec.Sequence, off: rec.Offset, time: rec.Time})
		}
	}
	return s
}

// applyRebuild fills t's windows with what scan found. Committer goroutine.
func (l *Log) applyRebuild(t *topic, scan *tailScan, now int64) {
	d := &l.c.dedup
	var seen []*producerState
	lowest := map[*producerState]uint64{}
	for _, rec := range scan.recs {
		p := t.producers[rec.producer]
		if p == nil {
			p = &producerState{t: t, id: rec.producer}
			if t.producers == nil {
				t.producers = make(map[string]*producerState)
			}
			t.producers[p.id] = p
			d.producers++
			seen = append(seen, p)
			lowest[p] = rec.seq
		}
		p.lastUse = rec.time
		lowest[p] = min(lowest[p], rec.seq)
		if i, found := p.find(rec.seq); !found {
			d.entries += p.insert(i, dedupEntry{seq: rec.seq, off: rec.off, time: rec.time}, d.window)
		}
	}
	// Least recently used first, so that the most recent ends up at the front.
	sort.Slice(seen, func(i, j int) bool { return seen[i].lastUse < seen[j].lastUse })
	for _, p := range seen {
		if !scan.complete && lowest[p] > 0 {
			// Sequences below those seen may have been stored before the scan's start.
			p.floor = max(p.floor, lowest[p]-1)
		}
		d.pushFront(p)
	}
	d.trim(now)
	l.stats.rebuilt.Add(uint64(scan.scanned))
	l.stats.rebuildNanos.Add(uint64(scan.took))
	l.m.dedupProducers.Set(float64(d.producers))
	if scan.scanned > 0 {
		l.log.Info("de-duplication state rebuilt from the topic's tail", "topic", t.name, "records", scan.scanned,
			"producers", len(seen), "complete", scan.complete, "took", scan.took)
	}
}
