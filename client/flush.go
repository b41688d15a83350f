package client

import (
	"context"
	"sync"
	"sync/atomic"
)

// Flush waits until every publish issued before the call (Publish, or a PublishAsync that
// returned) has its answer, an ack or an error, or until ctx ends (ctx's error, wrapped).
// Publishes that other goroutines issue while Flush waits are not waited for, so a steady
// stream of new publishes cannot hold it forever. Flush does not report the publishes'
// outcomes: their Futures do. After Close every publish is answered (ErrClosed), so Flush
// returns at once.
func (c *Conn) Flush(ctx context.Context) error {
	e := c.flush.seal()
	select {
	case <-e.done:
		return nil
	default:
	}
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return wrap("flush", ctx.Err())
	}
}

// flushEpochs counts the Conn's unanswered publishes by epoch: the publishes issued between
// two Flush calls. Each Flush seals the current epoch and starts the next. An epoch is done
// when its publishes are answered and the epoch before it is done, so waiting for the sealed
// epoch waits for every publish issued before the Flush. Publishing costs one atomic
// increment and its answer one decrement.
type flushEpochs struct {
	mu  sync.Mutex // serialises seal
	cur atomic.Pointer[flushEpoch]
}

// flushEpoch is one epoch. n counts its unanswered publishes, plus one while it is the
// current epoch, plus one while the epoch before it is not done; it reaches zero once, and
// then done is closed and the next epoch loses the reference this one held.
type flushEpoch struct {
	n    atomic.Int64
	next *flushEpoch // set by seal before the current-epoch reference is released
	done chan struct{}
}

func (fe *flushEpochs) init() {
	e := &flushEpoch{done: make(chan struct{})}
	e.n.Store(1)
	fe.cur.Store(e)
}

// acquire counts a new publish in the current epoch and returns that epoch.
func (fe *flushEpochs) acquire() *flushEpoch {
	for {
		e := fe.cur.Load()
		// An epoch whose count reached zero is done (Flush sealed it meanwhile): it takes no
		// more publishes; the current one is loaded again.
		if n := e.n.Load(); n > 0 && e.n.CompareAndSwap(n, n+1) {
			return e
		}
	}
}

// seal ends the current epoch and returns it; a new one becomes current.
func (fe *flushEpochs) seal() *flushEpoch {
	fe.mu.Lock()
	old := fe.cur.Load()
	e := &flushEpoch{done: make(chan struct{})}
	e.n.Store(2) // current, and old not done
	old.next = e
	fe.cur.Store(e)
	fe.mu.Unlock()
	old.release()
	return old
}

// release drops one reference; the last one completes the epoch and releases the next.
func (e *flushEpoch) release() {
	for e != nil && e.n.Add(-1) == 0 {
		close(e.done)
		e = e.next
	}
}
