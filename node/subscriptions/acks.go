package subscriptions

import (
	"context"
	"errors"
	"io"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// A subscription's acknowledgements (its ack reader goroutine: ACK and COMMIT frames, a
// durable's stored positions) and its lag, read when /metrics is scraped.

// lag is the number of durable records in the subscription's topics not yet handed to the
// stream. Called by the metrics collector from any goroutine.
func (sub *Subscription) lag() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	var lag uint64
	var ins [lagChunk]wal.Instance
	var heads [lagChunk]uint64
	var at [lagChunk]*cursor
	k := 0
	sum := func() {
		sub.h.wal.HeadsOf(ins[:k], heads[:k])
		for i, c := range at[:k] {
			if heads[i] > c.pub {
				lag += heads[i] - c.pub
			}
		}
		clear(ins[:k])
		k = 0
	}
	for _, c := range sub.mu.curs {
		if !c.inst.Valid() { // a cursor of its own (not a sweep's): by name
			if _, head, ok := sub.h.wal.Bounds(c.topic); ok && head > c.pub {
				lag += head - c.pub
			}
			continue
		}
		// A sweep's cursor (sweep.go) holds its topic's log: its head is read from it, many
		// under one hold of the log's lock, instead of a lookup and a lock per topic.
		ins[k], at[k] = c.inst, c
		if k++; k == lagChunk {
			sum()
		}
	}
	sum()
	return lag
}

// readAcks is the ack goroutine of a subscription on its own stream: it reads ACK frames
// and hands them to takeAck, storing a durable consumer's positions whenever no further
// frame is buffered (ACKs that arrive together are stored together). It returns when the
// client closes or resets its side; after the client's FIN, every ACK read before it is
// stored when it returns, and only then does the subscription end and the node send FIN.
func (sub *Subscription) readAcks(r *wire.Reader) *wire.Error {
	for {
		f, err := r.Read()
		switch {
		case errors.Is(err, wire.ErrFrameTooLarge):
			return &wire.Error{Code: wire.CodeTooLarge, Message: err.Error()} // as a first frame over the limit
		case errors.Is(err, wire.ErrMalformed), errors.Is(err, io.ErrUnexpectedEOF):
			return &wire.Error{Code: wire.CodeProtocol, Message: err.Error()}
		case err != nil:
			return sub.storeAcks() // FIN, reset, or the connection ended: the subscription is over
		}
		if c, ok := f.(*wire.Commit); ok {
			if e := sub.commit(c); e != nil { // commit.go
				return e
			}
			continue
		}
		ack, ok := f.(*wire.Ack)
		if !ok {
			return wire.Errorf(wire.CodeProtocol, "unexpected %s on a subscription stream: only ACK and COMMIT may follow SUBSCRIBE", f.Type())
		}
		if e := sub.takeAck(ack.Index, ack.Index, ack.Offset); e != nil {
			return e
		}
		if !r.FrameBuffered() {
			if e := sub.storeAcks(); e != nil {
				return e
			}
		}
	}
}

// takeAck checks the client's ACK of the subscription's topic number n (wireIndex on the
// wire) at offset against what was sent: the topic must be bound on the stream and the
// record delivered on it, else the ACK is wrong and ends the subscription with
// CodeInvalidArgument. A durable consumer's position only moves forward: an ACK at or below
// the highest one stored (or staged) is accepted and ignored. An ACK of a topic another node
// serves is forwarded to it. Ack reader.
func (sub *Subscription) takeAck(n, wireIndex, offset uint64) *wire.Error {
	sub.mu.Lock()
	if n >= uint64(len(sub.mu.bound)) || offset >= sub.mu.bound[n].delivered {
		sub.mu.Unlock()
		return wire.Errorf(wire.CodeInvalidArgument, "ACK of topic index %d offset %d: no such record was delivered on this stream", wireIndex, offset)
	}
	bt := &sub.mu.bound[n]
	staged := false
	if bt.up == nil && sub.req.Durable != "" && offset+1 > bt.floor {
		bt.floor = offset + 1
		staged = true
	}
	cur := *bt
	sub.mu.Unlock()
	sub.series.acks.Inc()
	switch {
	case cur.up != nil:
		// The owner checks it again and stores a durable consumer's position.
		sub.forwardAck(n, cur, offset)
	case staged:
		sub.pending[cur.name] = offset
	}
	return nil
}

// storeAcks stores (synced) the durable positions takeAck staged. A position read from the
// client is stored even when the connection has ended meanwhile. The positions of this
// node's log go to it all at once, so they share its synced batches: a wildcard that
// acknowledges records of many topics at once waits for one fsync, not one per topic. Ack
// reader.
func (sub *Subscription) storeAcks() *wire.Error {
	n := sub.h
	type stored struct {
		topic string
		err   error
	}
	var done chan stored
	waiting := 0
	for t, off := range sub.pending {
		if n.topics.IsReplicated(t) {
			if e := n.topics.SetPosition(context.WithoutCancel(sub.ctx), sub.req.Durable, t, off, sub.ackedVector(t, off)); e != nil {
				return e
			}
			delete(sub.pending, t)
			continue
		}
		if done == nil {
			done = make(chan stored, len(sub.pending))
		}
		p := wal.Position{Name: sub.req.Durable, Topic: t, Value: off, Vector: sub.ackedVector(t, off)} // vector.go
		waiting++
		n.wal.AppendAsync(wal.AppendRequest{Position: &p}, func(res wal.AppendResult) { done <- stored{t, res.Err} })
	}
	var failed *wire.Error
	for range waiting {
		r := <-done
		switch {
		case r.err == nil:
			delete(sub.pending, r.topic)
		case failed != nil:
		case errors.Is(r.err, wal.ErrClosed):
			failed = wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		default:
			failed = wire.Errorf(wire.CodeInternal, "store position of %q on %q: %v", sub.req.Durable, r.topic, r.err)
		}
	}
	return failed
}

// lagChunk is how many heads lag reads under one hold of the log's lock.
const lagChunk = 512
