package node

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/wal"
)

// route decides where a publish to topic goes: "" for this node's log, or the name of the
// node of this region that owns the topic. A publish relayed here by another node is never
// relayed on: if this node does not own the topic, the nodes disagree on placement (a member
// change in flight) and the publish is refused, to be retried.
func (p *publisher) route(topic string) (string, *wire.Error) {
	n := p.s.n
	if n.place == nil {
		return "", nil
	}
	if n.rep != nil {
		return n.rep.routePublish(p.s.ctx, topic, p.s.peer, p.s.peerName)
	}
	owner, e := n.place.Owner(p.s.ctx, topic)
	switch {
	case e != nil:
		return "", e
	case owner == n.cfg.Name:
		return "", nil
	case p.s.peer:
		return "", wire.Errorf(wire.CodeUnavailable,
			"node %q was asked to append to %q but node %q owns it as far as it knows: placement is changing (a node joined or failed); retry",
			n.cfg.Name, topic, owner)
	}
	return owner, nil
}

// rerouteTo routes b again after a leadership move refused it before raft appended it
// (publisher.reroute), or after the node that relayed it here turned out to be the leader
// (b.back): to this node's log or the new leader, waiting for one until b.rerouteUntil.
// A batch refused again waits a little longer each time.
func (p *publisher) rerouteTo(b *pendingBatch) (string, *wire.Error) {
	n := p.s.n
	if n.rep == nil {
		return p.route(b.topic)
	}
	if b.back && b.reroutes == 0 {
		b.reroutes = 1 // routed again from now on, like a batch a move refused (waitTurn)
		n.rep.rerouted.Add(float64(len(b.seqs)))
	}
	if b.reroutes > 1 {
		wait := time.Duration(b.reroutes) * n.cfg.Raft.TickInterval
		select {
		case <-time.After(min(wait, time.Until(b.rerouteUntil))):
		case <-p.s.ctx.Done():
		}
	}
	ctx, cancel := context.WithDeadline(p.s.ctx, b.rerouteUntil.Add(n.cfg.Raft.QuorumTimeout))
	defer cancel()
	return n.rep.rerouteRoute(ctx, b.topic, p.s.peer, p.s.peerName)
}

// relayStream carries one publish stream's records for the topics one other node of the
// region owns: the publisher's reader goroutine writes PUBLISH frames, the stream's own
// reader goroutine matches the owner's answers to the waiting batches by seq. An owner that
// announces the publishopen feature is asked (PUBLISH_OPEN) to answer each publish once it
// is durable, in any order, so that a stall of one of its groups holds back only that
// group's answers; an older owner answers in order, which matching by seq reads alike.
type relayStream struct {
	p     *publisher
	owner string
	str   *quic.Stream
	w     *wire.Writer
	seq   uint64 // owned by the publisher's reader goroutine
	// unflushed: w holds frames not written yet (under the publisher's dispatchMu).
	unflushed bool
	anyOrder  bool // the stream began with PUBLISH_OPEN's any-order flag
	// buffer encodes a publish into w: BufferPublishMulti when the owner announces
	// publishmulti (batches of many topics share a frame), else BufferPublish.
	buffer func(p *wire.Publish, maxBody int)
	ended  chan struct{} // closed when readAnswers returns

	mu struct {
		sync.Mutex
		waiting    []*pendingBatch // sent, in the order sent (relaySeq), from the first not fully answered
		dead       *wire.Error     // the stream failed: no more batches
		answeredAt time.Time       // the owner's last answer (watchLeader, send's timer)
	}
}

// relay sends b to its owner. b is already queued for answering; every record of it gets
// an answer: the owner's, or an error saying the owner could not be reached.
func (p *publisher) relay(b *pendingBatch) {
	if len(b.seqs) == 1 { // a publish over many topics: kept in the batch (pendingBatch.one)
		b.one.outcome, b.one.err, b.one.got = [1]wal.RecordOutcome{}, [1]*wire.Error{}, [1]bool{}
		b.outcomes, b.errs, b.got = b.one.outcome[:], b.one.err[:], b.one.got[:]
	} else {
		b.outcomes = make([]wal.RecordOutcome, len(b.seqs))
		b.errs = make([]*wire.Error, len(b.seqs))
		b.got = make([]bool, len(b.seqs))
	}
	rs, e := p.relayTo(b.relayTo)
	if e == nil {
		e = rs.send(b)
	}
	if e != nil {
		p.failBatch(b, e)
	}
}

// relayTo returns the open relay stream to owner, opening one if needed.
func (p *publisher) relayTo(owner string) (*relayStream, *wire.Error) {
	if rs := p.relays[owner]; rs != nil {
		rs.mu.Lock()
		dead := rs.mu.dead != nil
		rs.mu.Unlock()
		if !dead {
			return rs, nil
		}
		delete(p.relays, owner)
	}
	n := p.s.n
	ctx, cancel := context.WithTimeout(p.s.ctx, 5*time.Second)
	defer cancel()
	str, err := n.fed.OpenStreamTo(ctx, owner)
	if err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "the owner of the topic, node %q of region %q, cannot be reached: %v; nothing was appended", owner, n.cfg.Region, err)
	}
	rs := &relayStream{p: p, owner: owner, str: str, w: wire.NewWriter(str), ended: make(chan struct{})}
	rs.buffer = rs.w.BufferPublish
	if n.peerKnows(owner, features.PublishMulti, 1) {
		rs.buffer = rs.w.BufferPublishMulti
	}
	if n.peerKnows(owner, features.PublishOpen, 1) {
		rs.anyOrder = true
		rs.w.Write(&wire.PublishOpen{Flags: wire.PublishAnyOrder}) // flushed with the first batch
	}
	if p.relays == nil {
		p.relays = make(map[string]*relayStream)
	}
	p.relays[owner] = rs
	p.relayWG.Add(1)
	go func() {
		defer p.relayWG.Done()
		defer close(rs.ended)
		rs.readAnswers()
	}()
	if n.rep != nil {
		p.relayWG.Add(1)
		go func() {
			defer p.relayWG.Done()
			rs.watchLeader()
		}()
	}
	return rs, nil
}

// send writes b's records as PUBLISH frames. Called by the publisher's reader goroutine.
func (rs *relayStream) send(b *pendingBatch) *wire.Error {
	rs.mu.Lock()
	if e := rs.mu.dead; e != nil {
		rs.mu.Unlock()
		return e
	}
	b.relaySeq = rs.seq
	b.relayWatch = rs.watch(b)
	rs.mu.waiting = append(rs.mu.waiting, b)
	rs.mu.Unlock()
	for _, r := range b.records {
		// Runs of publishes go as PUBLISH_BATCH frames, which every build reads on a peer
		// link (v0.1.0 on), answered with PUBLISH_ACKS: one frame each way per run rather
		// than per record, the relay's cost on a follower. To an owner that reads them,
		// as PUBLISH_MULTI frames: the batches of a client's publishes over many topics,
		// one record each, then share a frame too.
		rs.buffer(&wire.Publish{
			Seq: rs.seq, Topic: b.topic,
			ProducerID: r.ProducerID, Sequence: r.Sequence,
			Headers: r.Headers, Payload: r.Payload,
		}, relayBatchBody)
		rs.seq++
	}
	b.dropRecords() // the frames hold copies
	// Flushed when the publisher's reader has no frame left to read (flushRelays), so
	// that a client's publishes over many topics, one batch each, leave in one stream
	// write rather than one each; sooner once this much is buffered.
	if !rs.unflushed {
		rs.unflushed = true
		rs.p.unflushed = append(rs.p.unflushed, rs)
	}
	if rs.w.Buffered() >= relayFlushBytes {
		rs.flush()
	}
	return nil
}

// relayFlushBytes is how much a relay stream buffers before it writes without waiting for
// its publisher's reader to run out of frames.
const relayFlushBytes = 256 << 10

// flush writes what rs buffered (dispatchMu held).
func (rs *relayStream) flush() {
	rs.unflushed = false
	if err := rs.w.Flush(); err != nil {
		// The reader sees the stream fail too and answers every waiting record.
		rs.str.CancelRead(wire.AppCancelled)
	}
}

// flushRelays writes what the relays buffered (dispatchMu held): called before the
// publisher's reader may wait (for a frame, a window slot or the end) and after each
// dispatch off the reader.
func (p *publisher) flushRelaysLocked() {
	for _, rs := range p.unflushed {
		if rs.unflushed {
			rs.flush()
		}
	}
	clear(p.unflushed)
	p.unflushed = p.unflushed[:0]
}

func (p *publisher) flushRelays() {
	p.dispatchMu.Lock()
	p.flushRelaysLocked()
	p.dispatchMu.Unlock()
}

// watch has the node's relay watchdog check b until it is answered (replicated topics;
// nil otherwise). A replicated topic's leader answers within QuorumTimeout of its group's
// last progress (or refuses: propose), and a leader that moves ends this stream
// (watchLeader). One that has not answered for that long (and a half) while neither
// answering others nor reachable has failed or lost its link, before this node's failure
// detector says so; one still reachable is committing what its clients queued before
// these, and is waited for (up to maxQueuedPublish).
func (rs *relayStream) watch(b *pendingBatch) *watch {
	r := rs.p.s.n.rep
	if r == nil {
		return nil
	}
	q := r.n.cfg.Raft.QuorumTimeout
	wait, start := q+q/2, time.Now()
	return r.relays.add(func(now time.Time) bool {
		rs.p.mu.Lock()
		done := b.done
		rs.p.mu.Unlock()
		if done {
			return false
		}
		rs.mu.Lock()
		answered := rs.mu.answeredAt
		rs.mu.Unlock()
		progress := now.Sub(answered) < wait || r.reachable(rs.owner)
		if progress && now.Sub(start) < r.maxQueuedPublish() {
			return true
		}
		rs.failUnknown(wire.Errorf(wire.CodeUnavailable,
			"the leader of the topic, node %q of region %q, did not answer within %v: the outcome of every publish not yet answered on this stream is unknown; publish them again with their producer_id and sequence to learn it",
			rs.owner, r.n.cfg.Region, now.Sub(start).Round(time.Millisecond)))
		return false
	})
}

// relayBatchBody bounds the body of a PUBLISH_BATCH frame the relay sends (the Go
// client's size): within every node's frame limit (the payload limit plus 64 KiB).
const relayBatchBody = 64 << 10

// readAnswers matches the owner's PUBLISH_ACK, PUBLISH_ACKS and PUBLISH_ERROR frames, which
// come in the order the publishes were sent (or, anyOrder, as they complete), to the
// waiting batches by seq. When the stream ends early, every
// record still waiting is answered with an error naming the owner.
func (rs *relayStream) readAnswers() {
	n := rs.p.s.n
	r := wire.NewReader(rs.str, wire.Limits{})
	for {
		f, err := r.Read()
		if err != nil {
			rs.failUnknown(wire.Errorf(wire.CodeUnavailable,
				"the owner of the topic, node %q of region %q, went away before answering (%v): the outcome of every publish not yet answered on this stream is unknown; publish them again with their producer_id and sequence to learn it",
				rs.owner, n.cfg.Region, err))
			return
		}
		switch f := f.(type) {
		case *wire.PublishAck:
			if !rs.answer(f.Seq, wal.RecordOutcome{Offset: f.Offset, Time: f.Time, Duplicate: f.Flags&wire.AckDuplicate != 0}, nil) {
				return
			}
		case *wire.PublishAcks:
			for k := range f.Count {
				if !rs.answer(f.Seq+k, wal.RecordOutcome{Offset: f.Offset + k, Time: f.Time}, nil) {
					return
				}
			}
		case *wire.PublishError:
			if !rs.answer(f.Seq, wal.RecordOutcome{}, &wire.Error{Code: f.Code, Message: fmt.Sprintf("node %q (the topic's owner): %s", rs.owner, f.Message)}) {
				return
			}
		case *wire.ErrorFrame:
			rs.failUnknown(wire.Errorf(wire.CodeUnavailable,
				"the owner of the topic, node %q, ended the relay (%s): the outcome of every publish not yet answered on this stream is unknown; publish them again with their producer_id and sequence to learn it",
				rs.owner, f.Message))
			return
		default:
			rs.fail(wire.Errorf(wire.CodeInternal, "the owner of the topic, node %q, answered with %s", rs.owner, f.Type()))
			return
		}
	}
}

// answer gives the publish of seq waiting on the stream the owner's answer (an outcome, or
// e), completing its batch with its last record answered. False: the owner answered a
// publish that was not sent, or one twice, and the stream is failed.
func (rs *relayStream) answer(seq uint64, o wal.RecordOutcome, e *wire.Error) bool {
	p, n := rs.p, rs.p.s.n
	rs.mu.Lock()
	w := rs.mu.waiting
	// The batch holding seq: the last one sent from a seq at or below it.
	k := sort.Search(len(w), func(k int) bool { return w[k].relaySeq > seq }) - 1
	if k < 0 || seq-w[k].relaySeq >= uint64(len(w[k].seqs)) || w[k].got[seq-w[k].relaySeq] ||
		!rs.anyOrder && (k != 0 || seq-w[k].relaySeq != uint64(w[k].answered)) {
		rs.mu.Unlock()
		rs.fail(wire.Errorf(wire.CodeInternal, "node %q answered publish %d, which was not sent, was answered already or is out of order", rs.owner, seq))
		return false
	}
	b := w[k]
	rs.mu.answeredAt = time.Now()
	i := int(seq - b.relaySeq)
	// The outcome is written before the lock is let go: once it is, end may fail the rest of
	// the batch and mark it done, and the client's answers are written from outcomes.
	b.outcomes[i], b.errs[i] = o, e
	b.got[i] = true
	b.answered++
	complete := b.answered == len(b.seqs)
	if complete {
		// A complete batch stays in waiting (answered, skipped) until those before it
		// complete too: removing each from the middle moved every batch behind it, one per
		// record over many topics (thousands), per answer (issue 29).
		for len(w) > 0 && w[0].answered == len(w[0].seqs) {
			w[0] = nil
			w = w[1:]
		}
		rs.mu.waiting = w
		if b.relayWatch != nil {
			b.relayWatch.cancel()
		}
	}
	rs.mu.Unlock()
	if complete {
		if e == nil {
			n.place.RelayedPubs.Add(float64(len(b.seqs)))
		}
		p.attemptEnded(b, nil)
		p.mu.Lock()
		b.done = true
		p.mu.Unlock()
		p.signal()
	}
	return true
}

// fail marks the stream dead and answers every waiting record with e.
func (rs *relayStream) fail(e *wire.Error) { rs.end(e, false) }

// failUnknown marks the stream dead after its records were sent: the owner may have
// appended any of those still waiting, so they end the client's stream with e rather than
// being refused (a PUBLISH_ERROR says nothing was appended).
func (rs *relayStream) failUnknown(e *wire.Error) { rs.end(e, true) }

func (rs *relayStream) end(e *wire.Error, unknown bool) {
	rs.mu.Lock()
	if rs.mu.dead == nil {
		rs.mu.dead = e
	}
	waiting := rs.mu.waiting
	rs.mu.waiting = nil
	rs.mu.Unlock()
	rs.str.CancelRead(wire.AppCancelled)
	rs.str.CancelWrite(wire.AppCancelled)
	for _, b := range waiting {
		if b.answered == len(b.seqs) {
			continue // answered in full (answer)
		}
		if b.relayWatch != nil {
			b.relayWatch.cancel()
		}
		b.unknown = unknown
		rs.p.failBatch(b, e)
	}
}

// failBatch answers b's records the owner did not answer with e.
func (p *publisher) failBatch(b *pendingBatch, e *wire.Error) {
	for i := range b.seqs {
		if !b.got[i] {
			b.errs[i] = e
		}
	}
	b.dropRecords()
	p.attemptEnded(b, nil)
	p.mu.Lock()
	b.done = true
	p.mu.Unlock()
	p.signal()
}

// watchLeader ends a relay to a replicated topic's leader that is no longer its leader as
// this node sees it (the old leader failed before its failure was detected, or lost its
// quorum): what it has not answered is answered unavailable, outcome unknown, instead of
// waiting for the relay's bound. Runs until the relay ends.
func (rs *relayStream) watchLeader() {
	r := rs.p.s.n.rep
	tick := time.NewTicker(r.n.cfg.Raft.ObserveInterval)
	defer tick.Stop()
	// A leadership handed over (a drain, the balancer, a stop) leaves the old leader up: it
	// answers what it took, committed under the new leader or routed on to it
	// (publishorder.go), and its answers keep coming. One that failed before this node's
	// failure detector says so answers nothing: the relay waits an election timeout after
	// the move, or after the old leader's last answer, whichever is later.
	// At least 500 ms (the default's election timeout), also where test timers are faster:
	// a loaded old leader can take longer than 200 ms between two answers while it routes
	// what it had taken to the new leader.
	grace := max(time.Duration(r.n.cfg.Raft.ElectionTicks)*r.n.cfg.Raft.TickInterval, 500*time.Millisecond)
	var movedAt time.Time
	for {
		select {
		case <-rs.ended:
			return
		case <-tick.C:
		}
		rs.mu.Lock()
		topic, predicted := "", false
		if len(rs.mu.waiting) > 0 {
			topic, predicted = rs.mu.waiting[0].topic, rs.mu.waiting[0].predicted
		}
		last := rs.mu.answeredAt
		rs.mu.Unlock()
		now := r.leaderName(topic)
		wait := grace
		if predicted {
			// Relayed before its placement was read here (replpredict.go): to a predicted
			// leader, which passes it on when the placement named another group, or to a
			// new group's first leader. Its answer may take a placement and a relay more.
			wait = r.n.cfg.Raft.QuorumTimeout
		}
		if topic == "" || now == "" || now == rs.owner {
			movedAt = time.Time{}
			continue
		}
		if movedAt.IsZero() {
			movedAt = time.Now()
		}
		if r.reachable(rs.owner) && time.Since(movedAt) < wait || time.Since(last) < wait {
			continue
		}
		rs.failUnknown(wire.Errorf(wire.CodeUnavailable,
			"the leader of %q moved from node %q to node %q, and node %q answered nothing for %v: the outcome of every publish not yet answered on this stream is unknown; publish them again with their producer_id and sequence to learn it",
			topic, rs.owner, now, rs.owner, wait))
	}
}
