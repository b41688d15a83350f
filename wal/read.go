package wal

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// TopicInfo describes one durable topic.
type TopicInfo struct {
	Name    string
	First   uint64 // first retained offset
	Next    uint64 // high-watermark: the next offset to become durable
	Bytes   uint64 // stored bytes of [First, Next): keys and encoded values
	Records uint64 // Next - First
	Config  TopicConfig
}

// infoLocked describes t; the caller holds l.mu.
func (t *topic) infoLocked() TopicInfo {
	return TopicInfo{
		Name: t.name, First: t.first, Next: t.hwm,
		Bytes: t.hwmPos - t.firstPos, Records: t.hwm - t.first, Config: t.cfg,
	}
}

// view is a consistent copy of a topic's reader-visible state.
type view struct {
	t               *topic
	first, firstPos uint64
	hwm, hwmPos     uint64
}

func (l *Log) view(name string) (view, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	t := l.mu.topics[name]
	if t == nil {
		return view{}, false
	}
	return view{t: t, first: t.first, firstPos: t.firstPos, hwm: t.hwm, hwmPos: t.hwmPos}, true
}

// gone explains a topic that view did not find (see goneLocked).
func (l *Log) gone(name string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.goneLocked(name)
}

// Bounds returns the first retained offset and the high-watermark (the next
// offset to become durable) of a topic; ok is false for an unknown topic.
func (l *Log) Bounds(topic string) (first, next uint64, ok bool) {
	v, ok := l.view(topic)
	return v.first, v.hwm, ok
}

// BoundsID is Bounds with the topic's ID in the log: never handed out twice, so a topic
// deleted and created again has another. A caller that keeps state for many topics can key
// it by the ID, a map the GC need not scan, instead of by the name (federation's catalog
// stream: issue 34's figure 3).
func (l *Log) BoundsID(topic string) (id uint32, first, next uint64, ok bool) {
	v, ok := l.view(topic)
	if !ok {
		return 0, 0, 0, false
	}
	return v.t.id, v.first, v.hwm, true
}

// TopicInfo returns what Topics says of one topic; ok is false for an unknown topic.
func (l *Log) TopicInfo(name string) (info TopicInfo, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	t := l.mu.topics[name]
	if t == nil {
		return TopicInfo{}, false
	}
	return t.infoLocked(), true
}

// TopicInstances lists the durable topics as Instances, in no order: for a reader that
// looks at each (a consumer group joining a wildcard over many topics) and keeps a handle of
// it, so that its later looks (BoundsAt) cost no lookup by name, without Topics' sort and
// per-topic details.
func (l *Log) TopicInstances() []Instance {
	l.mu.RLock()
	defer l.mu.RUnlock()
	ins := make([]Instance, 0, len(l.mu.topics))
	for _, t := range l.mu.topics {
		ins = append(ins, Instance{t})
	}
	return ins
}

// BoundsAt is Bounds of the log in (an Instance the caller kept), with no lookup by name;
// ok is false for the zero Instance and for a log deleted since (a topic of the same name
// created again is another Instance).
func (l *Log) BoundsAt(in Instance) (first, next uint64, ok bool) {
	if in.t == nil {
		return 0, 0, false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if in.t.deleted {
		return 0, 0, false
	}
	return in.t.first, in.t.hwm, true
}

// Topics lists the durable topics, sorted by name.
func (l *Log) Topics() []TopicInfo {
	l.mu.RLock()
	out := make([]TopicInfo, 0, len(l.mu.topics))
	for _, t := range l.mu.topics {
		out = append(out, t.infoLocked())
	}
	l.mu.RUnlock()
	slices.SortFunc(out, func(a, b TopicInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// CreatedSince returns the names of the topics that became durable after the first mark
// (in that order; one deleted since is still named, one created again is named again) and
// the mark to pass next time. CreatedSince(-1) returns no names and the current mark. With
// NotifyNewTopics it lets a reader follow the creation of topics without listing them all
// at each one.
func (l *Log) CreatedSince(mark int) (names []string, next int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := l.mu.createdBase + len(l.mu.created)
	switch {
	case mark < 0 || mark >= n:
		return nil, n
	case mark < l.mu.createdBase:
		// Names this old were dropped (much churn): every topic now, as a reader that
		// began then would have heard of those still there.
		names = make([]string, 0, len(l.mu.topics))
		for name := range l.mu.topics {
			names = append(names, name)
		}
		slices.Sort(names)
		return names, n
	}
	return slices.Clone(l.mu.created[mark-l.mu.createdBase:]), n
}

// createdLocked appends topic to the creation journal (l.mu held for writing). Once the
// journal holds more than twice the topics (and 1,024) names, its older half is dropped, so
// topics created and deleted for ever do not grow it without bound; a mark from before the
// drop is answered with every topic (CreatedSince).
func (l *Log) createdLocked(topic string) {
	l.mu.created = append(l.mu.created, topic)
	if n := len(l.mu.created); n > 2*len(l.mu.topics)+1024 {
		drop := n / 2
		l.mu.created = slices.Clone(l.mu.created[drop:])
		l.mu.createdBase += drop
	}
}

// Read returns the records [from, min(HWM, from+maxRecords)) of a topic,
// stopping early before the encoded values would exceed maxBytes; it returns
// at least one record if any is available, even one larger than maxBytes.
// maxRecords or maxBytes <= 0 means no such limit. The result is empty when
// from >= HWM. A read before the first retained offset returns an
// *OffsetOutOfRangeError; an unknown topic ErrUnknownTopic. The records own
// their bytes (copied out of Pebble).
func (l *Log) Read(topic string, from uint64, maxRecords int, maxBytes int) ([]Record, error) {
	var out []Record
	sc := Scanner{l: l, topic: topic}
	if _, err := l.scan(&sc, false, from, maxRecords, maxBytes, func(r *Record) error {
		out = append(out, *r)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadFunc is Read without the copies: it calls fn for each record in offset order, with a
// record whose byte slices point into Pebble's memory and are valid only until fn returns
// (strings stay valid); the *Record itself is reused from call to call. fn must not block:
// the read holds an iterator open. It returns how many records fn accepted; on an error after
// some records (a corrupt one, a retention race) those records were good, and the error
// concerns the next one. An error from fn stops the read and is returned as it is.
func (l *Log) ReadFunc(topic string, from uint64, maxRecords int, maxBytes int, fn func(*Record) error) (int, error) {
	sc := Scanner{l: l, topic: topic, s: slab{alias: true}}
	return l.scan(&sc, false, from, maxRecords, maxBytes, fn)
}

// Scanner reads one topic in batches, like ReadFunc, but keeps its Pebble iterator from one
// batch to the next while the reads continue where the last one stopped: a subscription that
// catches up reads the log in batches of its read-ahead, and a new iterator per batch costs
// the scan about half again (each one re-positions and restarts Pebble's sequential
// read-ahead). The iterator sees only records below the high-watermark it was opened at; a
// read past that opens a new one.
//
// An open iterator pins the store's files and memtables, so a caller releases it (Release)
// before anything that may wait for long: a Scanner must never hold one while its consumer is
// stalled. Release before the Log is closed. One goroutine owns a Scanner.
type Scanner struct {
	l     *Log
	topic string
	s     slab
	rec   Record // reused for every record handed to fn

	it    *pebble.Iterator // nil when released
	t     *topic           // the topic it reads
	bound *topic           // the topic of its first read: a later one of the same name is another log
	lower uint64           // it sees the offsets from lower
	upper uint64           // up to, not including, upper
	at    uint64           // the offset of the record it is positioned on, when valid
	valid bool
	opens int // iterators opened so far (for tests)
}

// NewScanner returns a Scanner of topic; it opens no iterator until the first read.
func (l *Log) NewScanner(topic string) *Scanner {
	return &Scanner{l: l, topic: topic, s: slab{alias: true}}
}

// ReadFunc is Log.ReadFunc on the Scanner's topic, with the same contract, continuing with
// the iterator of the previous read when it can.
func (sc *Scanner) ReadFunc(from uint64, maxRecords int, maxBytes int, fn func(*Record) error) (int, error) {
	return sc.l.scan(sc, true, from, maxRecords, maxBytes, fn)
}

// Check binds the Scanner to its topic as it is now, if it is not bound yet (as its first
// read does), and reports a *TopicDeletedError when the topic it is bound to was deleted
// since: a reader served from elsewhere (a shared tail) learns of a delete through it.
func (sc *Scanner) Check() error { return sc.CheckAt(sc.l.Instance(sc.topic)) }

// Instance is a topic as the log holds it now: which log of that name, not its bounds. It is
// what Scanner.CheckAt compares with, so that many Scanners of one topic are checked with one
// look-up (a shared tail's fanout checks all its members once per round).
type Instance struct{ t *topic }

// Instance returns topic as the log holds it now; the zero Instance when there is none.
func (l *Log) Instance(topic string) Instance {
	v, _ := l.view(topic)
	return Instance{v.t}
}

// CheckAt is Check against in, an Instance of the Scanner's topic taken by the caller.
func (sc *Scanner) CheckAt(in Instance) error {
	if sc.bound == nil {
		sc.bound = in.t
		return nil
	}
	if in.t != sc.bound {
		return fmt.Errorf("wal: read %q: %w", sc.topic, &TopicDeletedError{Topic: sc.topic})
	}
	return nil
}

// Release closes the Scanner's iterator, if one is open; the next read opens a new one.
func (sc *Scanner) Release() {
	if sc.it == nil {
		return
	}
	sc.l.db.RLock()
	if !sc.l.db.closed { // after Close, Pebble has reported the iterator as leaked
		sc.closeLocked()
	}
	sc.l.db.RUnlock()
	sc.it = nil
}

// closeLocked closes the iterator; the caller holds l.db's read lock.
func (sc *Scanner) closeLocked() {
	if sc.it != nil {
		_ = sc.it.Close() // a read that met an error has returned it already
	}
	sc.it, sc.t, sc.valid = nil, nil, false
}

// scan is the loop of Read, ReadFunc and Scanner.ReadFunc: it reads with sc's iterator,
// opening or re-positioning it as needed, and closes it at the end unless keep.
func (l *Log) scan(sc *Scanner, keep bool, from uint64, maxRecords int, maxBytes int, fn func(*Record) error) (int, error) {
	topic := sc.topic
	v, ok := l.view(topic)
	if sc.bound != nil && (!ok || v.t != sc.bound) {
		sc.Release()
		return 0, fmt.Errorf("wal: read %q: %w", topic, &TopicDeletedError{Topic: topic})
	}
	if !ok {
		sc.Release()
		return 0, fmt.Errorf("wal: read %q: %w", topic, l.gone(topic))
	}
	if keep {
		sc.bound = v.t
	}
	if from < v.first {
		return 0, &OffsetOutOfRangeError{Topic: topic, Offset: from, First: v.first, Next: v.hwm}
	}
	if from >= v.hwm {
		return 0, nil
	}
	end := v.hwm
	if maxRecords > 0 && uint64(maxRecords) < end-from {
		end = from + uint64(maxRecords)
	}
	db, err := l.readDB()
	if err != nil {
		return 0, fmt.Errorf("wal: read %q: %w", topic, err)
	}
	defer l.db.RUnlock()
	if !keep {
		defer sc.closeLocked()
	}
	if err := sc.position(db, v.t, v.hwm, from, end, keep); err != nil {
		return 0, fmt.Errorf("wal: read %q: %w", topic, err)
	}
	end = min(end, sc.upper)

	n := 0
	next, size := from, 0
	// One Record for the whole scan: fn is a func value, so the record it is given escapes;
	// a variable per record would be a heap allocation per record.
	rec := &sc.rec
	it := sc.it
	for ; sc.valid; sc.valid = it.Next() {
		key := it.Key()
		_, off, _ := parseRecordKey(key)
		sc.at = off
		if next >= end {
			return n, nil // positioned on the next record, for the next read
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return n, fmt.Errorf("wal: read %q at %d: %w", topic, next, err)
		}
		if maxBytes > 0 && n > 0 && size+len(val) > maxBytes {
			return n, nil
		}
		if off != next {
			return n, l.missing(v, next)
		}
		var reason string
		*rec, reason = decodeRecord(key, val, &sc.s)
		if reason != "" {
			return n, &CorruptError{Topic: topic, Offset: next, Reason: reason}
		}
		if err := fn(rec); err != nil {
			return n, err
		}
		n++
		size += len(val)
		next++
	}
	if err := it.Error(); err != nil {
		return n, fmt.Errorf("wal: read %q at %d: %w", topic, next, err)
	}
	if next < end {
		return n, l.missing(v, next)
	}
	return n, nil
}

// position puts sc's iterator on offset from of topic t (under the log's read lock): the
// iterator it has when from is within its bounds (where it stands, the next record, or a
// seek), else a new one bounded by the high-watermark hwm when keep (a Scanner goes on with
// it), by end when not.
func (sc *Scanner) position(db *pebble.DB, t *topic, hwm, from, end uint64, keep bool) error {
	if sc.it != nil && (sc.t != t || from < sc.lower || from >= sc.upper) {
		sc.closeLocked()
	}
	switch {
	case sc.it == nil:
		upper := hwm
		if !keep {
			upper = end
		}
		it, err := db.NewIter(&pebble.IterOptions{
			LowerBound: recordKey(t.id, from),
			UpperBound: recordKey(t.id, upper),
		})
		if err != nil {
			return err
		}
		sc.it, sc.t, sc.lower, sc.upper = it, t, from, upper
		sc.opens++
		sc.valid = it.First()
	case sc.valid && sc.at == from:
	case sc.valid && sc.at+1 == from:
		sc.valid = sc.it.Next()
	default:
		sc.valid = sc.it.SeekGE(recordKey(t.id, from))
	}
	return nil
}

// missing explains a durable offset that Pebble did not return: retention
// deleted it after the caller looked at the bounds (out of range), or the
// store lost it (corrupt).
func (l *Log) missing(v view, off uint64) error {
	now, ok := l.view(v.t.name)
	if !ok || now.t != v.t {
		return fmt.Errorf("wal: read %q at %d: %w", v.t.name, off, &TopicDeletedError{Topic: v.t.name})
	}
	if off < now.first {
		return &OffsetOutOfRangeError{Topic: v.t.name, Offset: off, First: now.first, Next: now.hwm}
	}
	return &CorruptError{Topic: v.t.name, Offset: off, Reason: "durable record missing"}
}

// OffsetForTime returns the first offset whose record has Time >= t, or the
// high-watermark if there is none. Timestamps never decrease within a log,
// so this is a binary search over offsets.
func (l *Log) OffsetForTime(topic string, t int64) (uint64, error) {
	v, ok := l.view(topic)
	if !ok {
		return 0, fmt.Errorf("wal: offset for time %q: %w", topic, l.gone(topic))
	}
	off, _, err := l.search(v, func(tm int64, _ uint64) bool { return tm >= t })
	if err != nil {
		return 0, fmt.Errorf("wal: offset for time %q: %w", topic, err)
	}
	return off, nil
}

// search returns the first offset in [first, hwm) of v whose record
// satisfies pred, and that record's byte position; or hwm and its byte
// position if none does. pred must be monotone in the offset (time and byte
// position both are). One iterator gives a consistent snapshot even while
// retention deletes the head of the log.
func (l *Log) search(v view, pred func(time int64, pos uint64) bool) (uint64, uint64, error) {
	if v.first >= v.hwm {
		return v.hwm, v.hwmPos, nil
	}
	db, err := l.readDB()
	if err != nil {
		return 0, 0, err
	}
	defer l.db.RUnlock()
	it, err := db.NewIter(&pebble.IterOptions{
		LowerBound: recordKey(v.t.id, v.first),
		UpperBound: recordKey(v.t.id, v.hwm),
	})
	if err != nil {
		return 0, 0, err
	}
	defer it.Close()
	if !it.First() {
		if err := it.Error(); err != nil {
			return 0, 0, err
		}
		// Retention deleted everything we were going to look at.
		return v.hwm, v.hwmPos, nil
	}
	lo, tm, pos, err := l.checkIter(v.t, it)
	if err != nil {
		return 0, 0, err
	}
	if pred(tm, pos) {
		return lo, pos, nil
	}
	// pred is false at lo and taken to be true at hwm.
	hi, hiPos := v.hwm, v.hwmPos
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if !it.SeekGE(recordKey(v.t.id, mid)) {
			if err := it.Error(); err != nil {
				return 0, 0, err
			}
			return 0, 0, &CorruptError{Topic: v.t.name, Offset: mid, Reason: "durable record missing"}
		}
		off, tm, pos, err := l.checkIter(v.t, it)
		if err != nil {
			return 0, 0, err
		}
		if off != mid {
			return 0, 0, &CorruptError{Topic: v.t.name, Offset: mid, Reason: "durable record missing"}
		}
		if pred(tm, pos) {
			hi, hiPos = mid, pos
		} else {
			lo = mid
		}
	}
	return hi, hiPos, nil
}
