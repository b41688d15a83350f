package node

import (
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// The fan-out writer: one goroutine per client connection and topic that writes the topic's
// new records to every subscription of that connection that is caught up on it, instead of
// each subscription waking its own run goroutine and writer goroutine for every append.
//
// A subscription parks on its connection's fanout when it is idle and simple: one cursor,
// on a topic with a shared tail, bound, with no vector to skip, no upstreams, its CAUGHT_UP
// (if asked for) sent, its own stream (not the ablation's shared one) and no batch in
// flight. While it is parked the fanout owns its cursor and its stream's writes; its run
// goroutine waits in its select for anything else (a COMMIT, a new topic, the end) and
// takes both back (unpark) before it does anything.
//
// The fanout encodes a run of records once for all the members that are at the same offset
// with the same topic index and framing, and writes it to each with TryWriteAll, which
// queues the bytes on the stream if its flow-control windows take them and never blocks. A
// member whose stream would block (its client reads slowly), whose cursor falls behind the
// tail, or whose stream failed is handed back to its run goroutine with the bytes not
// written: it writes them, blocking as before, and reads with its own cursor. So a slow
// subscriber never holds up the others of its connection (invariants I4, I5), and the
// fanout holds at most fanEncodings runs of at most ReadAhead bytes each. A round waits
// (at most fanoutMaxWait) while the connection has not yet sent what the last ones queued,
// so that under load records wait in the tail, not in the streams' send buffers.
//
// Locks: park and unpark take the tail's wmu and the fanout's mu one after the other, never
// one inside the other; a round holds mu and takes the tail's and the subscriptions' locks
// inside it.
type fanout struct {
	t    *topicTail
	wake chan struct{} // the tail's append wake-up, or a new member
	done chan struct{} // closed by the last member's unpark: the goroutine ends
	// parked is the number of subscriptions between their park and their unpark, members
	// or handed back; guarded by t.wmu.
	parked int

	mu      sync.Mutex    // held for a round; guards members and the members' handback
	members []*subRun     // parked: their cursor and stream writes are the fanout's until unpark
	encs    []fanEncoding // the runs encoded in the current round
	evict   int           // the slot of encs a full round re-encodes next
	w       *wire.Writer
	fanned  uint64 // records written in the current round, added to tailSet.fanned once at its end

	// The fanout goroutine's estimate of the bytes it queued on the connection that the
	// connection has not sent yet (waitSent).
	conn     *quic.Conn
	backlog  uint64
	lastSent uint64 // the connection's BytesSent when backlog was last brought up to date
}

// fanEncoding is a run of records encoded for the members at offset from with topic index
// index and framing batch: buf holds the frames of records [from, to).
type fanEncoding struct {
	from, to uint64
	index    uint64
	batch    bool
	buf      []byte
	records  int
	bytes    int // payload bytes
	err      error
	ok       bool // the run is in the tail (topicTail.read's ok)
	more     bool // the log has records after to
}

// fanEncodings bounds the runs a round keeps: members at offsets further apart than that in
// one round share fewer encodings, and are still served.
const fanEncodings = 4

// parkCursor is the cursor of a subscription that may park on a fanout, or nil. Run
// goroutine, idle.
func (sub *subRun) parkCursor() *cursor {
	if sub.sweep.on || len(sub.cursors) != 1 || sub.upCh != nil || (sub.caughtUp && !sub.caughtOK) {
		return nil
	}
	if _, own := sub.out.(ownStream); !own {
		return nil
	}
	c := sub.cursors[0]
	if c.tail == nil || !c.bound || c.skip != nil {
		return nil
	}
	return c
}

// park hands the subscription to its connection's fanout on its topic, when it can be
// served by one, once its last batch is written. It returns the fanout to give to unpark
// (nil: not parked) and the error of that last write. Run goroutine, idle.
func (sub *subRun) park() (*fanout, error) {
	c := sub.parkCursor()
	if c == nil {
		return nil, nil
	}
	if err := sub.waitWrite(); err != nil {
		return nil, err
	}
	t := c.tail
	t.wmu.Lock()
	f := t.fans[sub.s]
	if f == nil {
		f = &fanout{t: t, wake: make(chan struct{}, 1), done: make(chan struct{}), w: wire.NewWriter(nil), conn: sub.s.conn}
		f.lastSent = f.conn.ConnectionStats().BytesSent
		if t.fans == nil {
			t.fans = make(map[*session]*fanout)
		}
		t.fans[sub.s] = f
		t.addWaiter(sub.s, f.wake)
		go f.run()
	}
	f.parked++
	t.removeWaiter(sub.wake) // the fanout is woken for it
	t.wmu.Unlock()

	f.mu.Lock()
	f.members = append(f.members, sub)
	f.mu.Unlock()
	t.set.parks.Add(1)
	if h := t.set.onPark.Load(); h != nil {
		(*h)()
	}
	f.kick() // an append between the subscription's last read and now
	return f, nil
}

// unpark takes the subscription back from f, if it is parked (f not nil), and has its
// writer write what the fanout could not. Run goroutine, first thing after its select.
func (sub *subRun) unpark(f *fanout) {
	if f == nil {
		return
	}
	f.mu.Lock()
	if i := slices.Index(f.members, sub); i >= 0 {
		f.members = slices.Delete(f.members, i, i+1)
	}
	back := sub.handback
	sub.handback = nil
	f.mu.Unlock()

	t := f.t
	t.wmu.Lock()
	t.addWaiter(sub.s, sub.wake) // before the next read: no append is missed
	if f.parked--; f.parked == 0 {
		delete(t.fans, sub.s)
		t.removeWaiter(f.wake)
		close(f.done)
	}
	t.wmu.Unlock()

	if len(back) > 0 {
		sub.handOver(back)
	}
}

func (f *fanout) kick() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// A fanout does not start a round while more than fanoutBacklog of the bytes it queued are
// still unsent (waitSent): its records would only wait behind them in the streams' send
// buffers, which copy and grow (quic-go's TryWriteAll copies, and a stream's buffer past one
// packet is reallocated as it grows); in the tail they wait for free, and the next round
// writes them to each member in one run, one write per member instead of one per record.
// The wait is bounded by fanoutMaxWait, polled every fanoutPoll.
const (
	fanoutBacklog = 64 << 10
	fanoutPoll    = 100 * time.Microsecond
	fanoutMaxWait = 2 * time.Millisecond
)

// run is the fanout's goroutine: a round per wake-up, and more while a member has more.
func (f *fanout) run() {
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	defer poll.Stop()
	for {
		select {
		case <-f.wake:
		case <-f.done:
			return
		}
		for {
			if !f.waitSent(poll) {
				return
			}
			if !f.round() {
				break
			}
		}
	}
}

// waitSent waits until the connection has sent all but fanoutBacklog of what the rounds
// queued, or fanoutMaxWait; false when the fanout ended meanwhile. The connection's BytesSent
// counts every stream's bytes and QUIC's own, so the estimate falls at least as fast as this
// fanout's bytes leave: it never waits for bytes already sent. Bytes that never leave (a
// stream reset) are forgotten after one fanoutMaxWait.
func (f *fanout) waitSent(poll *time.Timer) bool {
	for waited := time.Duration(0); ; waited += fanoutPoll {
		sent := f.conn.ConnectionStats().BytesSent
		f.backlog -= min(f.backlog, sent-f.lastSent)
		f.lastSent = sent
		if f.backlog <= fanoutBacklog {
			return true
		}
		if waited >= fanoutMaxWait {
			f.backlog = 0
			return true
		}
		if waited == 0 {
			f.t.set.waits.Add(1)
		}
		poll.Reset(fanoutPoll) // stopped or fired: since Go 1.23 no stale tick is left
		select {
		case <-poll.C:
		case <-f.done:
			return false
		}
	}
}

// round writes each member's available records (at most one read of the tail's bounds per
// member, as a subscription's own round) and reports whether a member has more.
func (f *fanout) round() (more bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.encs {
		f.encs[i].records = -1 // none is valid in a new round
	}
	// One look-up of the topic for all the members: the same check as each one's own
	// Scanner.Check, which would take the log's lock once per member.
	in := f.t.set.log.Instance(f.t.topic)
	for i := 0; i < len(f.members); {
		sub := f.members[i]
		served, again := f.serve(sub, in)
		if !served {
			f.members = slices.Delete(f.members, i, i+1)
			sub.poke() // its run goroutine unparks it
			f.t.set.handbacks.Add(1)
			continue
		}
		more = more || again
		i++
	}
	f.t.set.fanned.Add(f.fanned) // one atomic per round, not per member: every fanout adds to it
	f.fanned = 0
	return more
}

// serve writes sub's available records. served is false when sub must go back to its run
// goroutine (with sub.handback set to what it must write first); again is true when it has
// more records than one read gave. in is the topic as the log held it when the round began.
func (f *fanout) serve(sub *subRun, in wal.Instance) (served, again bool) {
	c := sub.cursors[0]
	if err := c.scan.CheckAt(in); err != nil {
		return false, false // deleted: its own read reports it
	}
	e := f.encoding(c.next, sub.out.index(c.index), sub.batch, sub.s.n)
	if e.err != nil || !e.ok {
		return false, false // behind the tail, or an error its own read will meet
	}
	if e.records == 0 {
		return true, false
	}
	// Count the run as delivered before it is written, as sendAvailable does.
	sub.mu.Lock()
	sub.mu.bound[c.index].delivered = e.to
	c.pub = e.to
	sub.mu.Unlock()
	c.next = e.to
	sub.series.records.Add(float64(e.records))
	sub.series.bytes.Add(float64(e.bytes))
	// quic.ErrWouldBlock, or the stream's error, which the writer meets again and ends on.
	if err := sub.out.(ownStream).str.TryWriteAll(e.buf); err != nil {
		sub.handback = slices.Clone(e.buf)
		return false, false
	}
	f.fanned += uint64(e.records)
	f.backlog += uint64(len(e.buf))
	return true, e.more
}

// encoding is the run of records from offset from for topic index index and framing batch,
// encoded in this round already or now.
func (f *fanout) encoding(from, index uint64, batch bool, n *Node) *fanEncoding {
	for i := range f.encs {
		if e := &f.encs[i]; e.records >= 0 && e.from == from && e.index == index && e.batch == batch {
			return e
		}
	}
	var e *fanEncoding
	if len(f.encs) < fanEncodings {
		f.encs = append(f.encs, fanEncoding{})
		e = &f.encs[len(f.encs)-1]
	} else {
		e = &f.encs[f.evict] // members far apart: one slot is re-encoded
		f.evict = (f.evict + 1) % fanEncodings
	}
	e.from, e.to, e.index, e.batch, e.bytes, e.records, e.more = from, from, index, batch, 0, 0, false
	region := n.cfg.Region
	var rec wire.Record
	got, ok, err := f.t.read(from, maxReadRecords, n.cfg.ReadAhead, func(r *wal.Record) {
		rec = recordFrame(index, r, region)
		if batch {
			f.w.BufferRecord(&rec)
		} else {
			f.w.Buffer(&rec)
		}
		e.bytes += len(r.Payload)
		e.to = r.Offset + 1
	})
	e.buf = f.w.Swap(e.buf) // the slot's old buffer is the writer's next
	e.records, e.ok, e.err = got, ok, err
	if got > 0 {
		_, hwm, _ := f.t.set.log.Bounds(f.t.topic)
		e.more = e.to < hwm
	}
	return e
}
