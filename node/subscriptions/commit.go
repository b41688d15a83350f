package subscriptions

import (
	"sync/atomic"

	"github.com/quicmq/quicmq/internal/wire"
)

// Acknowledgement confirmation (docs/protocol.md, "Commit"): a client sends COMMIT{Seq} on
// a subscription stream; the ack reader stores every position staged by the ACKs before it
// (synced), then the run goroutine answers COMMITTED{Seq} in order with the stream's other
// frames. Group members answer it the same way (member.go).

// commits is a subscription's COMMIT state shared by its goroutines: the ack reader raises
// asked, the run goroutine writes COMMITTED up to it (subRun.committed).
type commits struct {
	asked atomic.Uint64 // the highest COMMIT whose ACKs are stored
}

// commit stores the positions staged so far and has the run goroutine confirm seq. Ack
// reader.
func (sub *Subscription) commit(c *wire.Commit) *wire.Error {
	if e := sub.storeAcks(); e != nil {
		return e
	}
	if c.Seq > sub.commits.asked.Load() {
		sub.commits.asked.Store(c.Seq)
	}
	sub.poke()
	return nil
}

// checkCommitted buffers COMMITTED when a COMMIT was stored and not yet answered, and
// reports whether it did. Run goroutine.
func (sub *subRun) checkCommitted() bool {
	asked := sub.commits.asked.Load()
	if asked <= sub.committed {
		return false
	}
	sub.committed = asked
	sub.w.Buffer(&wire.Committed{Seq: asked})
	return true
}
