package tail

import (
	"slices"
	"sync"
	"time"

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
// The fanout reaches a parked subscription only through Member, on its own goroutine, while
// the subscription's run goroutine waits.
//
// Locks: Park and Unpark take the tail's wmu and the fanout's mu one after the other, never
// one inside the other; a round holds mu and takes the tail's and the subscriptions' locks
// inside it.
type Fanout struct {
	t    *Topic
	wake chan struct{} // the tail's append wake-up, or a new member
	done chan struct{} // closed by the last member's unpark: the goroutine ends
	// parked is the number of subscriptions between their park and their unpark, members
	// or handed back; guarded by t.wmu.
	parked int

	mu      sync.Mutex        // held for a round; guards members and back
	members []Member          // parked: their cursor and stream writes are the fanout's until Unpark
	back    map[Member][]byte // a handed-back member's frames: counted as delivered, not written
	encs    []fanEncoding     // the runs encoded in the current round
	evict   int               // the slot of encs a full round re-encodes next
	w       *wire.Writer
	fanned  uint64 // records written in the current round, added to Set.fanned once at its end

	// The fanout goroutine's estimate of the bytes it queued on the connection that the
	// connection has not sent yet (waitSent).
	conn     Conn
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
	ok       bool // the run is in the tail (Topic.Read's ok)
	more     bool // the log has records after to
}

// fanEncodings bounds the runs a round keeps: members at offsets further apart than that in
// one round share fewer encodings, and are still served.
const fanEncodings = 4

// Member is a subscription parked on a fanout. Between Park and Unpark the fanout owns its
// cursor and its stream's writes, and calls these on the fanout's goroutine while the
// subscription's run goroutine waits; it is one cursor on the fanout's topic, bound, with
// RECORD frames of its own stream.
type Member interface {
	// Position is the cursor: the offset it reads next, its topic's index on the stream, and
	// whether the client takes RECORDS frames.
	Position() (next, index uint64, batch bool)
	// CheckAt is the cursor's wal.Scanner.CheckAt: an error when the topic it reads is not in.
	CheckAt(in wal.Instance) error
	// Delivered counts the records before offset to as delivered (records of them, payload
	// bytes), before they are written, and moves the cursor to to.
	Delivered(to uint64, records, bytes int)
	// TryWrite queues buf on the stream if its flow-control windows take it, never blocking
	// (quic.Stream.TryWriteAll).
	TryWrite(buf []byte) error
	// Poke wakes the run goroutine: the fanout handed the member back.
	Poke()
}

// Park hands m, a subscription of connection conn whose writes are all done, to conn's
// fanout on the topic: from now on the tail's appends wake the fanout instead of wake, m's
// wake-up channel. It returns the fanout to give to Unpark. m's run goroutine, idle.
func (t *Topic) Park(conn Conn, m Member, wake chan struct{}) *Fanout {
	t.wmu.Lock()
	f := t.fans[conn]
	if f == nil {
		f = &Fanout{t: t, wake: make(chan struct{}, 1), done: make(chan struct{}), w: wire.NewWriter(nil), conn: conn}
		f.lastSent = f.conn.ConnectionStats().BytesSent
		if t.fans == nil {
			t.fans = make(map[Conn]*Fanout)
		}
		t.fans[conn] = f
		t.addWaiter(conn, f.wake)
		go f.run()
	}
	f.parked++
	t.removeWaiter(wake) // the fanout is woken for it
	t.wmu.Unlock()

	f.mu.Lock()
	f.members = append(f.members, m)
	f.mu.Unlock()
	t.set.parks.Add(1)
	if h := t.set.onPark.Load(); h != nil {
		(*h)()
	}
	f.kick() // an append between the subscription's last read and now
	return f
}

// Unpark takes m back from f, its tail's appends waking wake again, and returns the frames
// the fanout counted as delivered and could not write, which m's writer must write first.
// m's run goroutine, first thing after its select.
func (f *Fanout) Unpark(conn Conn, m Member, wake chan struct{}) (back []byte) {
	f.mu.Lock()
	if i := slices.Index(f.members, m); i >= 0 {
		f.members = slices.Delete(f.members, i, i+1)
	}
	back = f.back[m]
	delete(f.back, m)
	f.mu.Unlock()

	t := f.t
	t.wmu.Lock()
	t.addWaiter(conn, wake) // before the next read: no append is missed
	if f.parked--; f.parked == 0 {
		delete(t.fans, conn)
		t.removeWaiter(f.wake)
		close(f.done)
	}
	t.wmu.Unlock()
	return back
}

func (f *Fanout) kick() {
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
func (f *Fanout) run() {
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
func (f *Fanout) waitSent(poll *time.Timer) bool {
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
func (f *Fanout) round() (more bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.encs {
		f.encs[i].records = -1 // none is valid in a new round
	}
	// One look-up of the topic for all the members: the same check as each one's own
	// Scanner.Check, which would take the log's lock once per member.
	in := f.t.set.log.Instance(f.t.topic)
	for i := 0; i < len(f.members); {
		m := f.members[i]
		served, again := f.serve(m, in)
		if !served {
			f.members = slices.Delete(f.members, i, i+1)
			m.Poke() // its run goroutine unparks it
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

// serve writes m's available records. served is false when m must go back to its run
// goroutine (with f.back[m] set to what it must write first); again is true when it has
// more records than one read gave. in is the topic as the log held it when the round began.
func (f *Fanout) serve(m Member, in wal.Instance) (served, again bool) {
	if err := m.CheckAt(in); err != nil {
		return false, false // deleted: its own read reports it
	}
	next, index, batch := m.Position()
	e := f.encoding(next, index, batch)
	if e.err != nil || !e.ok {
		return false, false // behind the tail, or an error its own read will meet
	}
	if e.records == 0 {
		return true, false
	}
	// Count the run as delivered before it is written, as the subscription's own read does.
	m.Delivered(e.to, e.records, e.bytes)
	// quic.ErrWouldBlock, or the stream's error, which the writer meets again and ends on.
	if err := m.TryWrite(e.buf); err != nil {
		if f.back == nil {
			f.back = make(map[Member][]byte)
		}
		f.back[m] = slices.Clone(e.buf)
		return false, false
	}
	f.fanned += uint64(e.records)
	f.backlog += uint64(len(e.buf))
	return true, e.more
}

// encoding is the run of records from offset from for topic index index and framing batch,
// encoded in this round already or now.
func (f *Fanout) encoding(from, index uint64, batch bool) *fanEncoding {
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
	cfg := &f.t.set.cfg
	var rec wire.Record
	got, ok, err := f.t.Read(from, cfg.MaxRead, cfg.ReadAhead, func(r *wal.Record) {
		rec = Frame(index, r, cfg.Region)
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

// Frame is the RECORD frame of rec for topic index index: a record that names no origin
// region is region's, the node's own.
func Frame(index uint64, rec *wal.Record, region string) wire.Record {
	origin := rec.OriginRegion
	if origin == "" {
		origin = region
	}
	return wire.Record{
		Index: index, Offset: rec.Offset, Time: rec.Time,
		OriginRegion: origin, OriginOffset: rec.OriginOffset,
		ProducerID: rec.ProducerID, Sequence: rec.Sequence,
		Headers: rec.Headers, Payload: rec.Payload,
	}
}
