package tail

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/wal"
)

// The shared tail: the records last appended to a topic, read from the log once per append
// batch for every subscription of the node that is caught up on the topic, instead of one
// Pebble read per subscription per wake-up. A subscription whose cursor is behind the tail
// (it lags, or started earlier) reads the log with its own cursor (wal.Scanner) and moves
// to the tail once it reaches it.
//
// Memory: a topic has a tail while at least one subscription of this node has a cursor on
// it, and the tail holds at most Config.TailRecords records and Config.TailBytes bytes of
// payload and header values (each record's in an allocation of its own, beside its ~150 B
// wal.Record); its ring starts at 16 slots and grows with the appends up to TailRecords.
//
// I3: the tail is filled by wal.Log.ReadFunc, which returns nothing past the durable
// high-watermark, so the tail never holds a record that is not durable.
//
// The records of the tail own their bytes (copied out of Pebble's memory, each into an
// allocation of its size that is never reused) and are never written to after the fill:
// readers encode them into their own frame buffers, under the read lock, so no frame aliases
// a buffer that changes.

// Config is what a Set needs of the node's configuration.
type Config struct {
	Records   int    // the node's TailRecords: the records a tail holds; <= 0: no tails
	Bytes     int    // the node's TailBytes: the payload and header bytes a tail holds
	ReadAhead int    // the node's ReadAhead: the payload bytes of one run a fanout writes
	MaxRead   int    // the records of one read of the tail by a fanout
	Region    string // this node's region: the origin of records that name none (Frame)
}

// Conn is a client connection: the tail wakes the subscriptions of one connection one after
// the other, and a connection has one fanout per topic, which asks it what it has sent. Its
// dynamic value is compared, so it must be a pointer (the node's session).
type Conn interface {
	ConnectionStats() quic.ConnectionStats
}

// Set is the node's shared tails, by topic. Safe for concurrent use.
type Set struct {
	log      *wal.Log
	cfg      Config
	records  int // cfg.Records; <= 0: no tails
	maxBytes int // cfg.Bytes

	fills     atomic.Uint64          // reads of the log into a tail
	served    atomic.Uint64          // records handed to subscriptions from a tail
	parks     atomic.Uint64          // subscriptions handed to a fanout (fanout.go)
	handbacks atomic.Uint64          // subscriptions a fanout handed back to their run goroutine
	fanned    atomic.Uint64          // records a fanout wrote to a subscription's stream
	waits     atomic.Uint64          // rounds a fanout held back for its connection to send (waitSent)
	onPark    atomic.Pointer[func()] // tests: called after each park

	mu struct {
		sync.Mutex
		byTopic map[string]*Topic
	}
}

// NewSet makes the node's tails over its log l.
func NewSet(l *wal.Log, cfg Config) *Set {
	ts := &Set{log: l, cfg: cfg, records: cfg.Records, maxBytes: cfg.Bytes}
	ts.mu.byTopic = make(map[string]*Topic)
	return ts
}

// Stats are the tails' and the fanouts' counters since the Set was made.
type Stats struct {
	Fills     uint64 // reads of the log into a tail
	Served    uint64 // records handed to subscriptions from a tail
	Parks     uint64 // subscriptions handed to a fanout
	Handbacks uint64 // subscriptions a fanout handed back to their run goroutine
	Fanned    uint64 // records a fanout wrote to a subscription's stream
	Waits     uint64 // rounds a fanout held back for its connection to send
}

// Stats reads the counters.
func (ts *Set) Stats() Stats {
	return Stats{Fills: ts.fills.Load(), Served: ts.served.Load(), Parks: ts.parks.Load(),
		Handbacks: ts.handbacks.Load(), Fanned: ts.fanned.Load(), Waits: ts.waits.Load()}
}

// OnPark has f called after each park, from the parking subscription's run goroutine
// (tests).
func (ts *Set) OnPark(f func()) { ts.onPark.Store(&f) }

// Topics is the number of topics that have a tail.
func (ts *Set) Topics() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.mu.byTopic)
}

// Register exports the tails' and the fanouts' counters on reg, read when scraped.
func (ts *Set) Register(reg prometheus.Registerer) {
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	reg.MustRegister(
		counter("quicmq_tail_fills_total", "Reads of the log into a topic's shared tail: one per append batch for all its caught-up readers.", &ts.fills),
		counter("quicmq_fanout_parks_total", "Caught-up subscriptions handed to their connection's fanout writer for their topic.", &ts.parks),
		counter("quicmq_fanout_handbacks_total", "Subscriptions a fanout handed back to their own writer: its window would not take a run, it fell behind the tail, or its stream failed.", &ts.handbacks),
		counter("quicmq_fanout_records_total", "Records fanout writers queued on subscription streams (also counted in quicmq_subscription_records_total).", &ts.fanned),
		counter("quicmq_fanout_waits_total", "Fanout rounds held back until the connection had sent what the earlier rounds queued.", &ts.waits),
	)
}

// Acquire returns topic's tail, making it if this is its first user, or nil when tails are
// off. The caller gives it back with Release.
func (ts *Set) Acquire(topic string) *Topic {
	if ts == nil || ts.records <= 0 {
		return nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.mu.byTopic[topic]
	if t == nil {
		t = &Topic{set: ts, topic: topic, ring: make([]wal.Record, min(ts.records, minTailRing))}
		t.stopNotify = ts.log.NotifyFunc(topic, t.wake)
		_, t.first, _ = ts.log.Bounds(topic) // starts empty at the high-watermark
		t.next = t.first
		ts.mu.byTopic[topic] = t
	}
	t.users++
	return t
}

// Release gives back a tail Acquire returned; the last user's release drops it.
func (ts *Set) Release(t *Topic) {
	if t == nil {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t.users--; t.users == 0 {
		delete(ts.mu.byTopic, t.topic)
		t.stopNotify()
	}
}

// Topic is one topic's tail: a ring of its records [first, next), and the wake-up
// channels of the subscriptions reading the topic.
type Topic struct {
	set        *Set
	topic      string
	users      int    // guarded by set.mu
	stopNotify func() // ends the log's calls of wake

	// waiters are woken in this order when the topic's high-watermark advances: those of one
	// client connection one after the other, so that their writes reach QUIC together and
	// leave in as few packets as possible.
	wmu     sync.Mutex
	waiters []tailWaiter
	fans    map[Conn]*Fanout // a connection's caught-up subscriptions' writer (fanout.go)

	mu    sync.RWMutex // the fill writes, readers read
	ring  []wal.Record // grows up to TailRecords; offset o is at ring[o%len]
	first uint64       // the oldest record held
	next  uint64       // the offset after the newest
	bytes int          // payload and header bytes held
}

type tailWaiter struct {
	s  Conn
	ch chan struct{}
}

// Watch makes a non-blocking send on ch, as wal.Log.Notify does, whenever the topic's
// high-watermark advances, ch's subscription being one of connection s. cancel stops it; it
// is safe to call more than once.
func (t *Topic) Watch(s Conn, ch chan struct{}) (cancel func()) {
	t.wmu.Lock()
	t.addWaiter(s, ch)
	t.wmu.Unlock()
	return func() {
		t.wmu.Lock()
		defer t.wmu.Unlock()
		t.removeWaiter(ch)
	}
}

// addWaiter adds ch, of connection s, after the last waiter of s. Caller holds wmu.
func (t *Topic) addWaiter(s Conn, ch chan struct{}) {
	at := len(t.waiters)
	for i := len(t.waiters) - 1; i >= 0; i-- {
		if t.waiters[i].s == s {
			at = i + 1 // after the last of its connection
			break
		}
	}
	t.waiters = slices.Insert(t.waiters, at, tailWaiter{s: s, ch: ch})
}

// removeWaiter removes ch, if it waits. Caller holds wmu.
func (t *Topic) removeWaiter(ch chan struct{}) {
	t.waiters = slices.DeleteFunc(t.waiters, func(w tailWaiter) bool { return w.ch == ch })
}

// wake wakes the waiters, a connection's one after the other. The log's completer calls it;
// it never blocks.
func (t *Topic) wake() {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	for _, w := range t.waiters {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// Read calls fn for the tail's records from offset from on, at most maxRecords records and
// maxBytes payload bytes (at least one record if any is there), filling the tail from the log
// first when from is at its end and the log has more. fn must not block or keep the record.
// ok is false when from is not in the tail (before it, or cut off by retention): the caller
// reads the log itself. got is the number of records fn was given.
func (t *Topic) Read(from uint64, maxRecords, maxBytes int, fn func(*wal.Record)) (got int, ok bool, err error) {
	first, hwm, known := t.set.log.Bounds(t.topic)
	if !known || from < first {
		return 0, false, nil // the log's own read reports the unknown topic or the gap
	}
	if from >= hwm {
		return 0, true, nil
	}
	t.mu.RLock()
	if from >= t.next {
		t.mu.RUnlock()
		if err := t.fill(from, hwm); err != nil {
			return 0, false, err
		}
		t.mu.RLock()
	}
	defer t.mu.RUnlock()
	if from < t.first || from >= t.next {
		return 0, false, nil
	}
	size := 0
	for off := from; off < t.next && got < maxRecords; off++ {
		rec := &t.ring[off%uint64(len(t.ring))]
		if got > 0 && size+len(rec.Payload) > maxBytes {
			break
		}
		fn(rec)
		size += len(rec.Payload)
		got++
	}
	t.set.served.Add(uint64(got))
	return got, true, nil
}

// fill reads the records [next, hwm) from the log into the ring, once for all the readers
// that find the tail behind the high-watermark, evicting the oldest records beyond
// TailRecords and TailBytes. A tail further behind than it can hold starts again, empty, at
// from: the readers it held were slower than the log, and read it themselves from now on.
func (t *Topic) fill(from, hwm uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next >= hwm || from < t.next {
		return nil // another reader filled it meanwhile
	}
	size := uint64(t.set.records)
	if hwm-t.next > size {
		t.reset(from)
	}
	// Read without the log's copies, which share 64 KiB chunks per read: one small record
	// per append batch would keep a chunk each. ownRecord copies each record into bytes of
	// its own size.
	_, err := t.set.log.ReadFunc(t.topic, t.next, int(min(hwm-t.next, size)), t.set.maxBytes, func(r *wal.Record) error {
		if r.Offset != t.next { // ReadFunc returns the dense run asked for
			t.reset(r.Offset)
		}
		if held := t.next - t.first; held == uint64(len(t.ring)) {
			if held < size {
				t.grow()
			} else {
				t.evict()
			}
		}
		t.ring[r.Offset%uint64(len(t.ring))] = ownRecord(r)
		t.bytes += recordBytes(r)
		t.next = r.Offset + 1
		return nil
	})
	t.set.fills.Add(1)
	for t.bytes > t.set.maxBytes && t.next-t.first > 1 {
		t.evict()
	}
	return err // the records before it are good
}

// minTailRing is the ring a tail starts with: a topic read by subscriptions costs little
// until its appends need more.
const minTailRing = 16

// grow doubles the ring, at most to TailRecords. Caller holds mu.
func (t *Topic) grow() {
	ring := make([]wal.Record, min(2*len(t.ring), t.set.records))
	for off := t.first; off < t.next; off++ {
		ring[off%uint64(len(ring))] = t.ring[off%uint64(len(t.ring))]
	}
	t.ring = ring
}

// evict drops the oldest record. Caller holds mu.
func (t *Topic) evict() {
	slot := &t.ring[t.first%uint64(len(t.ring))]
	t.bytes -= recordBytes(slot)
	*slot = wal.Record{} // lets its chunk go
	t.first++
}

// reset empties the ring and starts it at off. Caller holds mu.
func (t *Topic) reset(off uint64) {
	for t.first < t.next {
		t.evict()
	}
	t.first, t.next, t.bytes = off, off, 0
}

// ownRecord is a copy of r, which points into the log's memory, with its payload and header
// values in one allocation of their size (strings stay valid as they are).
func ownRecord(r *wal.Record) wal.Record {
	c := *r
	buf := make([]byte, 0, recordBytes(r))
	buf = append(buf, r.Payload...)
	c.Payload = buf[:len(r.Payload):len(r.Payload)]
	if len(r.Headers) > 0 {
		c.Headers = make([]wal.Header, len(r.Headers))
		for i, h := range r.Headers {
			start := len(buf)
			buf = append(buf, h.Value...)
			c.Headers[i] = wal.Header{Key: h.Key, Value: buf[start:len(buf):len(buf)]}
		}
	}
	return c
}

func recordBytes(r *wal.Record) int {
	n := len(r.Payload)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
