package subscriptions

import (
	"github.com/quicmq/quicmq/node/tail"
	"github.com/quicmq/quicmq/wal"
)

// A caught-up subscription parked on its connection's fanout (node/tail's fanout.go): the
// run goroutine hands its one cursor and its stream's writes over (park) and waits in its
// select; the fanout reaches them through subRun's tail.Member methods below, on its own
// goroutine, until the run goroutine takes them back (unpark).

// parkCursor is the cursor of a subscription that may park on a fanout, or nil: idle and
// simple, with one cursor on a topic with a shared tail, bound, with no vector to skip, no
// upstreams, its CAUGHT_UP (if asked for) sent and its own stream (not the ablation's
// shared one). Run goroutine, idle.
func (sub *subRun) parkCursor() *cursor {
	if sub.sweep.on || len(sub.cursors) != 1 || sub.upCh != nil || (sub.caughtUp && !sub.caughtOK) {
		return nil
	}
	if _, own := sub.out.(OwnStream); !own {
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
func (sub *subRun) park() (*tail.Fanout, error) {
	c := sub.parkCursor()
	if c == nil {
		return nil, nil
	}
	if err := sub.waitWrite(); err != nil {
		return nil, err
	}
	return c.tail.Park(sub.conn, sub, sub.in.wake), nil
}

// unpark takes the subscription back from f, if it is parked (f not nil), and has its
// writer write what the fanout could not. Run goroutine, first thing after its select.
func (sub *subRun) unpark(f *tail.Fanout) {
	if f == nil {
		return
	}
	if back := f.Unpark(sub.conn, sub, sub.in.wake); len(back) > 0 {
		sub.wr.HandOver(back)
	}
}

// The tail.Member methods: called by the fanout, on its goroutine, while the subscription
// is parked (its one cursor is parkCursor's).

// Position is the cursor's next offset, its topic's index on the stream, and the framing.
func (sub *subRun) Position() (next, index uint64, batch bool) {
	c := sub.cursors[0]
	return c.next, sub.out.Index(c.index), sub.batch
}

// CheckAt reports whether the cursor's topic is still the one it reads (in: the log's).
func (sub *subRun) CheckAt(in wal.Instance) error { return sub.cursors[0].scan.CheckAt(in) }

// Delivered counts the records before to as delivered, before they are written, as
// sendAvailable does, and moves the cursor past them.
func (sub *subRun) Delivered(to uint64, records, bytes int) {
	c := sub.cursors[0]
	sub.mu.Lock()
	sub.mu.bound[c.index].delivered = to
	c.pub = to
	sub.mu.Unlock()
	c.next = to
	sub.series.records.Add(float64(records))
	sub.series.bytes.Add(float64(bytes))
}

// TryWrite queues buf on the subscription's own stream without blocking: quic.ErrWouldBlock,
// or the stream's error, which the writer meets again and ends on.
func (sub *subRun) TryWrite(buf []byte) error {
	return sub.out.(OwnStream).Str.TryWriteAll(buf)
}

// Poke wakes the run goroutine: the fanout handed the subscription back.
func (sub *subRun) Poke() { sub.in.poke() }
