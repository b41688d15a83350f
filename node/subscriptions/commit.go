package subscriptions

import (
	"github.com/quicmq/quicmq/internal/wire"
)

// Acknowledgement confirmation (docs/protocol.md, "Commit"): a client sends COMMIT{Seq} on
// a subscription stream; the ack reader stores every position staged by the ACKs before it
// (synced), then the run goroutine answers COMMITTED{Seq} in order with the stream's other
// frames. Group members answer it the same way (node/member.go).

// commit stores the positions staged so far and has the run goroutine confirm seq. Ack
// reader.
func (sub *Subscription) commit(c *wire.Commit) *wire.Error {
	if e := sub.storeAcks(); e != nil {
		return e
	}
	sub.in.commit(c.Seq) // the run goroutine answers it (inbox.go)
	return nil
}

// checkCommitted buffers COMMITTED when a COMMIT was stored and not yet answered, and
// reports whether it did. Run goroutine.
func (sub *subRun) checkCommitted() bool {
	asked := sub.in.asked.Load()
	if asked <= sub.committed {
		return false
	}
	sub.committed = asked
	sub.w.Buffer(&wire.Committed{Seq: asked})
	return true
}
