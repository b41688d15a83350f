package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/wal"
	"go.etcd.io/raft/v3"
)

// The replicated publish path: publishes proposed to their topic's group (batched per
// round), answered once committed and applied; durable positions set through raft.

// maxQueuedPublish bounds how long a publish waits behind others while its group progresses
// (propose, and a relay to its leader): 6 QuorumTimeouts, at least 30 s (Kafka's request
// timeout); past it the publish fails even so.
func (r *replicated) maxQueuedPublish() time.Duration {
	return max(6*r.n.cfg.Raft.QuorumTimeout, 30*time.Second)
}

// replicatedError carries what a client is told about a replicated append. unknown: the
// entry may still commit (or has), so the publish must not be refused with PUBLISH_ERROR
// (which says nothing was appended): its stream ends instead (publish.go).
type replicatedError struct {
	e       *wire.Error
	unknown bool
	// moved: refused before raft appended it, because this node no longer leads the group
	// or is handing its leadership over; the publisher routes it again (reroute).
	moved bool
}

func (e *replicatedError) Error() string { return e.e.Message }

// propose appends records to topic through its group (this node leads it) and calls done
// once with the outcome: after the entry is committed by a quorum and applied here, or with
// an error within QuorumTimeout. Proposals made one after another by one goroutine enter
// the log in that order.
func (r *replicated) propose(topic string, recs []wal.Record, done func(wal.AppendResult)) {
	r.checkBatching()
	t := r.lookup(topic)
	if t == nil {
		t = r.unplacedLed(topic) // nil but in the broken build (predict_broken.go)
	}
	fail := func(e *wire.Error) { done(wal.AppendResult{Err: &replicatedError{e: e}}) }
	if t == nil {
		fail(wire.Errorf(wire.CodeUnavailable, "topic %q is not placed yet; retry", topic))
		return
	}
	we := &replica.WalEntry{Kind: replica.EntryAppend, Topic: topic, Records: recs}
	data, err := replica.EncodeEntry(takeEntryBuf(replica.EncodedBound(we)), we)
	if err != nil {
		putEntryBuf(data)
		fail(wire.Errorf(wire.CodeInvalidArgument, "%v", err))
		return
	}
	// The publish fails when its group stops making progress for QuorumTimeout, not when it
	// has waited that long: a leader short of CPU or disk queues the publishes its clients
	// keep in flight, and one behind thousands of others waits its turn (the clients'
	// windows bound the queue) rather than failing with an unknown outcome. Progress is an
	// entry applied here, or this node still leading the group: raft's CheckQuorum makes a
	// leader that hears from no quorum for an election timeout step down, which fails its
	// pending proposals (ErrDropped) at once. One watchdog checks every publish proposed
	// here (replwatch.go): a timer each was one per record over many topics.
	var settled atomic.Bool
	finish := func(res wal.AppendResult) {
		if settled.CompareAndSwap(false, true) {
			done(res)
		}
	}
	start := time.Now()
	w := r.proposals.add(func(now time.Time) bool {
		if settled.Load() {
			return false
		}
		role, _ := r.d.Role(t.group)
		if (role.Leader || r.appliedSince(t.group, now.Add(-r.n.cfg.Raft.QuorumTimeout))) && now.Sub(start) < r.maxQueuedPublish() {
			return true
		}
		finish(wal.AppendResult{Err: &replicatedError{e: wire.Errorf(wire.CodeUnavailable,
			"%s; the outcome of every publish not yet answered on this stream is unknown: publish them again with their producer_id and sequence to learn it",
			r.noQuorum(t, "did not commit the publish").Message), unknown: true}})
		return false
	})
	// ProposeAsync takes its context only for the hand-over, which the queue does not wait
	// for: no deadline (a timer each) is needed.
	r.d.ProposeAsync(context.Background(), t.group, data, func(res replica.Result, err error) {
		putEntryBuf(data) // the driver reads data no more (ProposeAsync)
		w.cancel()
		if err != nil {
			e, unknown := proposeError(t, err)
			var nl *replica.NotLeaderError
			moved := errors.As(err, &nl) || errors.Is(err, replica.ErrLeadershipMoving) || errors.Is(err, replica.ErrDropped)
			finish(wal.AppendResult{Err: &replicatedError{e: e, unknown: unknown, moved: moved}})
			return
		}
		ar, ok := res.Detail.(*wal.AppendResult)
		if !ok {
			finish(wal.AppendResult{Err: fmt.Errorf("node: topic %q: entry %d applied without a result", topic, res.Index)})
			return
		}
		finish(*ar)
	})
}

// entryBufs holds the buffers a publish's entry is encoded into, each back once the driver
// is done with it (ProposeAsync's done), one pool per size class (entryBufMin << i bytes):
// a buffer made fresh for every publish batch (up to 4 MiB) was a first touch of new memory
// for every record a leader proposed, 5% of a leader's CPU under 16 publishers (issue 29's
// profile), and lived only until the engine copied it into its envelope. Classes, because
// batches range from one record to maxBatchBytes: one pool handed a large batch the small
// buffer of an earlier one, which then grew afresh anyway.
var entryBufs [entryBufClasses]sync.Pool

const (
	entryBufMin     = 4 << 10
	entryBufClasses = 12 // up to 8 MiB, past maxBatchBytes and its records' headers
)

// takeEntryBuf returns an empty buffer with room for n bytes, from its class's pool when
// one is there.
func takeEntryBuf(n int) []byte {
	c := entryBufClass(n)
	if c >= entryBufClasses {
		return make([]byte, 0, n)
	}
	if b, ok := entryBufs[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, entryBufMin<<c)
}

// putEntryBuf gives back a buffer of takeEntryBuf's, which its holder no longer uses.
func putEntryBuf(b []byte) {
	c := entryBufClass(cap(b))
	if c >= entryBufClasses || entryBufMin<<c != cap(b) {
		return // not one of the classes' sizes: grown past its bound, or made outside them
	}
	b = b[:0]
	entryBufs[c].Put(&b)
}

// entryBufClass is the smallest class whose buffers hold n bytes.
func entryBufClass(n int) int {
	c := 0
	for entryBufMin<<c < n {
		c++
	}
	return c
}

// checkBatching turns the driver's batching of proposals (many in one raft entry) on once
// every node of the region announces that it reads batch entries (replica.EnvelopeFeature),
// and off while one does not; asked at most once a second, by every publish.
func (r *replicated) checkBatching() {
	now := time.Now().UnixNano()
	last := r.batchCheck.Load()
	if now-last < int64(time.Second) || !r.batchCheck.CompareAndSwap(last, now) {
		return
	}
	ok, _ := r.n.RegionKnows(features.Envelope, replica.EnvelopeFeature)
	r.d.SetBatching(ok)
}

// proposeError maps a refused or failed proposal to what the client is told; unknown says
// the entry may have been (or may still be) committed.
func proposeError(t *repTopic, err error) (e *wire.Error, unknown bool) {
	var nl *replica.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader changed before the publish was proposed (now %s): nothing was appended; retry",
			t.name, cmpOr(t.nameOf(nl.Leader), "unknown")), false
	case errors.Is(err, replica.ErrLeadershipMoving):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: its group's leadership is moving to another replica (a drain, the leader balancer or a stop): nothing was appended; retry", t.name), false
	case errors.Is(err, replica.ErrDropped):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader changed before the publish committed: nothing was appended; retry", t.name), false
	case errors.Is(err, raft.ErrProposalDropped):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader holds too much uncommitted data (its followers are behind): nothing was appended; retry", t.name), false
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, replica.ErrStopped):
		// ProposeAsync's hand-over timed out: the driver never took it.
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the node's raft driver did not take the publish in time: nothing was appended; retry", t.name), false
	case errors.Is(err, replica.ErrStopped), errors.Is(err, context.Canceled):
		// A proposal pending when the driver stopped may have been committed by the others.
		return wire.Errorf(wire.CodeShuttingDown, "node shutting down before the publish to %q was applied here: its outcome is unknown; publish it again with its producer_id and sequence to learn it", t.name), true
	}
	return wire.Errorf(wire.CodeInternal, "topic %q: replicated append failed (%v): its outcome is unknown", t.name, err), true
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// setPosition stores a durable consumer's position on a replicated topic, with its vector
// (nil: none), through its group (this node must lead it), returning after it is committed
// and applied.
func (r *replicated) setPosition(ctx context.Context, name, topic string, off uint64, vec map[string]uint64) *wire.Error {
	t := r.lookup(topic)
	if t == nil {
		return wire.Errorf(wire.CodeInternal, "topic %q is not a replicated topic", topic)
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	res := r.sm.Propose(ctx, r.d, &replica.WalEntry{Kind: replica.EntrySetPosition, Topic: topic, Name: name, Value: off, Vector: vec})
	if res.Err != nil {
		if errors.Is(res.Err, context.DeadlineExceeded) {
			return r.noQuorum(t, "did not store the consumer's position")
		}
		e, _ := proposeError(t, res.Err)
		return e
	}
	return nil
}
