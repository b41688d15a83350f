package subscriptions

import (
	"errors"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/tail"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/wal"
)

// A subscription's reads: its cursors' records from the log or the shared tail, encoded
// into the read-ahead buffer and handed to its writer goroutine (I3, I5). Run goroutine,
// except writer.

// sendAvailable reads each cursor's available records (at most ReadAhead bytes per cursor
// per round, so one busy topic cannot starve the others) and writes them to the stream.
// Writes block when the client's flow-control window is full: that is the backpressure. A
// failed write ends the round with errStreamGone.
func (sub *subRun) sendAvailable() (int, *wire.Error) {
	if sub.sweep.on {
		return sub.sendSwept() // sweep.go
	}
	n := sub.h
	sent := 0
	for _, c := range sub.cursors {
		got, bytes, err := sub.readCursor(c)
		if got > 0 {
			// Count the batch as delivered before it is written: the client may ACK a
			// record as soon as it arrives.
			sub.delivered(c)
			sent += got
			sub.series.records.Add(float64(got))
			sub.series.bytes.Add(float64(bytes))
			// Write this cursor's batch (at most ReadAhead bytes) before reading the next:
			// the read-ahead bounds what a subscription holds, whatever its lag.
			if sub.flush() != nil {
				return sent, errStreamGone
			}
		}
		// errors.AsType, not errors.As, here as everywhere in node: As's target escapes, an
		// allocation per read.
		oor, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
		switch {
		case err == nil:
		case isOOR:
			sub.skipDeleted(c, oor.First)
			sent++
		case errors.Is(err, wal.ErrUnknownTopic):
		case errors.Is(err, wal.ErrTopicDeleted):
			return sent, wire.Errorf(wire.CodeTopicDeleted, "topic %q was deleted (quicmq topics delete); subscribe again to read a topic created under its name", sub.actor.ClientName(c.topic))
		case errors.Is(err, wal.ErrClosed):
			return sent, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		default:
			n.log.Error("subscription read failed", "topic", c.topic, "offset", c.next, "err", err)
			return sent, wire.Errorf(wire.CodeInternal, "read %q at offset %d: %v", c.topic, c.next, err)
		}
	}
	return sent, nil
}

// readCursor encodes c's available records (at most ReadAhead bytes) into the stream's
// buffer, from the topic's shared tail when c is caught up (node/tail), else straight from the
// log's memory with c's own scanner, with no copy and no blocking while the log's iterator is
// open, and advances c. It returns the records and payload bytes encoded, and the log's
// error, if any, about the record after them.
func (sub *subRun) readCursor(c *cursor) (int, int, error) {
	n := sub.h
	sub.enc, sub.encBytes = c, 0 // for encode, during this read
	if c.tail != nil {
		if err := c.scan.Check(); err != nil {
			return 0, 0, err // deleted (a replicated topic's delete keeps its log and tail)
		}
		got, ok, err := c.tail.Read(c.next, maxReadRecords, n.cfg.ReadAhead, sub.encodeFn)
		if ok || err != nil {
			return got, sub.encBytes, err
		}
	}
	sub.holding = true
	got, err := c.scan.ReadFunc(c.next, maxReadRecords, n.cfg.ReadAhead, sub.scanFn)
	return got, sub.encBytes, err
}

// encode buffers rec, the next record of the cursor readCursor reads (sub.enc), and advances
// the cursor. It is a method, bound once (encodeFn), so that a read allocates no closure.
func (sub *subRun) encode(rec *wal.Record) {
	c := sub.enc
	bind := ""
	if !c.bound {
		if sub.runs {
			bind = sub.bindIndex(c) // in the record's RUNS entry
		} else {
			sub.bind(c)
		}
	}
	if c.skip != nil && vector.Covered(c.skip, rec.OriginRegion, sub.h.cfg.Region, rec.OriginOffset) {
		if bind != "" {
			sub.bufferTopic(c, bind) // the topic is bound now: its later records carry no name
		}
		c.next = rec.Offset + 1 // the vector it resumed from covers it (vector.go)
		return
	}
	sub.rec = tail.Frame(sub.out.Index(c.index), rec, sub.h.cfg.Region) // one value, reused: encoded at once
	if sub.runs {
		sub.rec.Bind = bind
		sub.w.BufferRun(&sub.rec)
	} else if sub.batch {
		sub.w.BufferRecord(&sub.rec)
	} else {
		sub.w.Buffer(&sub.rec)
	}
	sub.encBytes += len(rec.Payload)
	c.next = rec.Offset + 1
}

// encodeScanned is encode for a wal.Scanner's ReadFunc.
func (sub *subRun) encodeScanned(rec *wal.Record) error {
	sub.encode(rec)
	return nil
}

// skipDeleted buffers GAP for c's records from c.next to first, which retention or a purge
// deleted before the subscription reached them, and moves c past them. The gap counts as
// sent: an ACK inside it is right (protocol.md), so a durable whose remaining records were
// all deleted can store a position past them.
func (sub *subRun) skipDeleted(c *cursor, first uint64) {
	sub.bind(c)
	sub.w.Buffer(&wire.Gap{Index: sub.out.Index(c.index), From: c.next, To: first})
	c.next = first
	sub.delivered(c)
}

// delivered records that everything of c before c.next was sent (or skipped by a GAP): an
// ACK up to it is right from now on, and the lag counts from it.
func (sub *subRun) delivered(c *cursor) {
	sub.mu.Lock()
	sub.mu.bound[c.index].delivered = c.next
	c.pub = c.next
	sub.mu.Unlock()
}

// bind buffers the TOPIC frame for c before its first record or gap. It never blocks.
func (sub *subRun) bind(c *cursor) {
	if c.bound {
		return
	}
	sub.bufferTopic(c, sub.bindIndex(c))
}

// bindIndex gives c the next topic number of the stream and returns the topic's name as the
// client sees it, for a TOPIC frame or the RUNS entry of its first record. c is not bound.
func (sub *subRun) bindIndex(c *cursor) string {
	sub.mu.Lock()
	c.index = uint64(len(sub.mu.bound))
	sub.mu.bound = append(sub.mu.bound, boundTopic{name: c.topic, delivered: c.next, floor: c.stored})
	sub.mu.Unlock()
	c.bound = true
	return sub.actor.ClientName(c.topic)
}

// bufferTopic buffers the TOPIC frame binding c's number to name.
func (sub *subRun) bufferTopic(c *cursor, name string) {
	sub.topicF = wire.Topic{Index: sub.out.Index(c.index), Name: name}
	sub.w.Buffer(&sub.topicF)
}

// flush hands the buffered frames to the subscription's writer goroutine and returns once
// the previous batch is written (Writer.Flush): the run goroutine reads and
// encodes the next batch from the log while QUIC packs this one, so a subscription holds at
// most two batches (2 x ReadAhead), whatever its lag. The error is that of the previous
// batch: a failed write is seen one flush later. end waits for the last batch and stops the
// writer.
func (sub *subRun) flush() error { return sub.wr.Flush(sub.w, sub.holding, sub.releaseScans) }

// waitWrite waits until the batch flush handed over, if any, is written, and returns the
// write's error. A long wait releases the log iterators first (Writer.Wait).
func (sub *subRun) waitWrite() error { return sub.wr.Wait(sub.holding, sub.releaseScans) }

// releaseScans closes the log iterators the cursors' scanners hold.
func (sub *subRun) releaseScans() {
	if !sub.holding {
		return
	}
	if sub.sweep.sw != nil {
		sub.sweep.sw.Release()
	}
	for _, c := range sub.cursors {
		if c.scan != nil {
			c.scan.Release()
		}
	}
	sub.holding = false
}

// errStreamGone is sendAvailable's report that a write to the stream failed: the client is
// gone or reset it, so the subscription ends with no ERROR frame to send.
var errStreamGone = &wire.Error{Code: wire.CodeInternal, Message: "subscription stream write failed"}

// maxReadRecords bounds the records of one read of a cursor, beside ReadAhead's bytes: 4096
// records of 100 B are 400-500 KiB stored, so for small records the bytes bound comes first.
const maxReadRecords = 4096
