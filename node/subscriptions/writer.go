package subscriptions

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/internal/wire"
)

// Writer is a subscription's writer goroutine and the hand-over of batches to it. The run
// goroutine owns the Writer (only it calls its methods) and reads and encodes the next batch
// from the log while the writer goroutine writes this one, so a subscription holds at most
// two batches (2 x ReadAhead), whatever its lag (I5). The writer goroutine holds nothing of
// the subscription but the batch it was handed, and gives the buffer back with the result.
type Writer struct {
	out     Stream
	blocked prometheus.Counter // seconds a write was blocked on flow control; nil: not counted
	q       chan []byte        // batches for the writer goroutine (started by the first HandOver)
	done    chan written       // the writer's result for each batch, and its buffer back
	writing bool               // a batch was handed over and its result not yet taken
	spare   []byte             // the buffer of the last batch written, reused for the next
	hold    *time.Timer        // bounds how long Wait keeps the log iterators (scanHold)
}

// NewWriter returns the writer of a subscription whose frames go to out. It starts no
// goroutine until the first batch.
func NewWriter(out Stream) *Writer { return &Writer{out: out} }

// CountBlocked has the writer add to blocked the time each write was blocked on flow
// control. Before the first batch.
func (wr *Writer) CountBlocked(blocked prometheus.Counter) { wr.blocked = blocked }

// Flush hands the frames buffered in w to the writer goroutine, which writes them, counting
// the time the write was blocked, and returns once the previous batch is written (Wait,
// with holding and release). The error is that of the previous batch: a failed write is
// seen one flush later. Close waits for the last batch and stops the writer.
func (wr *Writer) Flush(w *wire.Writer, holding bool, release func()) error {
	if err := wr.Wait(holding, release); err != nil {
		return err
	}
	if w.Buffered() == 0 {
		return nil
	}
	buf := w.Swap(wr.spare)
	wr.spare = nil
	wr.HandOver(buf)
	return nil
}

// HandOver has the writer goroutine write buf, whole frames already counted as delivered:
// a batch Flush took from the buffer, or the frames a fanout could not queue (park.go).
// The writer is idle.
func (wr *Writer) HandOver(buf []byte) {
	if wr.q == nil {
		wr.q, wr.done = make(chan []byte), make(chan written, 1)
		go writeBatches(wr.out, wr.blocked, wr.q, wr.done)
	}
	wr.writing = true
	wr.q <- buf
}

// written is the writer goroutine's answer for one batch: the write's error, and the
// batch's buffer to reuse (nil: too large to keep).
type written struct {
	err   error
	spare []byte
}

// writeBatches is a subscription's writer goroutine: one per subscription, for its life, so
// a live tail does not start a goroutine per batch. It holds nothing of the subscription but
// the batch it was handed and gives the buffer back with the result, so the run goroutine
// owns everything else.
func writeBatches(out Stream, blocked prometheus.Counter, in <-chan []byte, done chan<- written) {
	for buf := range in {
		start := time.Now()
		err := out.Write(buf)
		if d := time.Since(start); d > 100*time.Microsecond && blocked != nil {
			blocked.Add(d.Seconds())
		}
		w := written{err: err}
		if cap(buf) <= 1<<20 {
			w.spare = buf[:0]
		}
		done <- w
	}
}

// Wait waits until the batch handed over, if any, is written, and returns the write's
// error. While the caller's cursors may hold log iterators (holding), a wait longer than
// scanHold runs release first, which closes them.
func (wr *Writer) Wait(holding bool, release func()) error {
	if !wr.writing {
		return nil
	}
	wr.writing = false
	if holding {
		select {
		case w := <-wr.done:
			return wr.took(w)
		default:
		}
		if wr.hold == nil {
			wr.hold = time.NewTimer(scanHold)
		} else {
			wr.hold.Reset(scanHold) // stopped or fired: since Go 1.23 no stale tick is left
		}
		select {
		case w := <-wr.done:
			wr.hold.Stop()
			return wr.took(w)
		case <-wr.hold.C:
			release()
		}
	}
	return wr.took(<-wr.done)
}

// took keeps a written batch's buffer for the next one and returns the write's error.
func (wr *Writer) took(w written) error {
	if w.spare != nil {
		wr.spare = w.spare
	}
	return w.err
}

// Close waits for the batch handed over, if any, and stops the writer goroutine. Its error
// is ignored: the subscription is ending.
func (wr *Writer) Close(holding bool, release func()) {
	wr.Wait(holding, release)
	if wr.q != nil {
		close(wr.q) // the writer goroutine ends
	}
}

// scanHold is how long Wait keeps the cursors' log iterators open while the writer is
// still busy: longer than writing one batch takes when the client keeps up, so a replay reads
// the log with one iterator from batch to batch (wal.Scanner), and short enough that a stalled
// subscriber pins nothing of the store.
const scanHold = 5 * time.Millisecond
