package subscriptions

import (
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/tail"
)

// What the node's goroutines other than the run goroutine may ask or tell a subscription.
// Each is safe on any goroutine unless it says otherwise.

// Request is the SUBSCRIBE as served (the tenant's namespace added, the flags taken off).
// It never changes.
func (sub *Subscription) Request() *wire.Subscribe { return sub.req }

// Conn is the connection of the session that serves the subscription.
func (sub *Subscription) Conn() tail.Conn { return sub.conn }

// SetUp is closed once SUBSCRIBED is written, or the subscription failed before.
func (sub *Subscription) SetUp() <-chan struct{} { return sub.setUp }

// Cancel ends the subscription: its stream gets FIN once its run goroutine has ended it.
func (sub *Subscription) Cancel() { sub.cancel() }

// End ends the subscription with e, unless an error already ends it.
func (sub *Subscription) End(e *wire.Error) {
	sub.in.fail(e)
	sub.cancel()
}

// BeforeEnd sets f to run on the run goroutine when it ends the subscription, before its last
// frame and FIN (a durable's subscription leaves the node and lets go of its lock there).
// Before Serve only.
func (sub *Subscription) BeforeEnd(f func()) { sub.beforeEnd = f }

// SeriesKey is the labels (pattern, subscription name) of the subscription's series. After
// Serve has begun (a subscription in Host.Live).
func (sub *Subscription) SeriesKey() [2]string { return sub.series.key }

// ServeAcks is the ack reader of a subscription on a stream of its own: once the set-up is
// done (ACKs are checked against the topics it binds) it reads ACK and COMMIT frames from r
// until the client's FIN or the stream's end, stores what they stage, and ends the
// subscription; a protocol error found on the way is the one the stream ends with.
func (sub *Subscription) ServeAcks(r *wire.Reader) {
	select {
	case <-sub.setUp:
	case <-sub.ctx.Done():
		return
	}
	defer sub.cancel() // the client's FIN ends the subscription, after its ACKs are stored
	if e := sub.readAcks(r); e != nil {
		sub.in.err.Store(e) // the ack reader's protocol error is the one the client gets
	}
}

// TakeAck checks an ACK of the subscription's topic number n (wireIndex on the wire) at
// offset and stages a durable's position (takeAck). For a shared stream's reader, the ack
// reader of its subscriptions.
func (sub *Subscription) TakeAck(n, wireIndex, offset uint64) *wire.Error {
	return sub.takeAck(n, wireIndex, offset)
}

// StoreAcks stores the positions TakeAck staged (storeAcks). Ack reader.
func (sub *Subscription) StoreAcks() *wire.Error { return sub.storeAcks() }

// Lag is the durable records of the subscription's topics not yet handed to its stream.
func (sub *Subscription) Lag() uint64 { return sub.lag() }

// NotifyNewTopic tells the subscription of a new topic that matches its pattern (the node's
// topic watcher, through HostConfig.Interest). It never blocks.
func (sub *Subscription) NotifyNewTopic(topic string) { sub.in.newTopic(topic) }

// MaxReadRecords bounds the records of one read of a cursor, beside ReadAhead's bytes: 4096
// records of 100 B are 400-500 KiB stored, so for small records the bytes bound comes first.
const MaxReadRecords = maxReadRecords

// LagByName is Lag computed the slow way, a lookup of each cursor's head by name: a
// reference for tests of Lag, which reads a sweep's heads from its cursors' logs.
func (sub *Subscription) LagByName() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	var lag uint64
	for _, c := range sub.mu.curs {
		if _, head, ok := sub.h.wal.Bounds(c.topic); ok && head > c.pub {
			lag += head - c.pub
		}
	}
	return lag
}
