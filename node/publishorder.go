package node

import (
	"slices"
	"sync"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
)

// A publish stream's order per topic across placements and leadership moves.
//
// Records published on one stream to one topic are appended in the order they were read,
// also when the topic's leader changes under them: a batch goes to the topic's log here or
// to its leader's node (a relay stream), and a later batch of the topic is dispatched
// somewhere else only once every earlier one was answered (inFlight), since two paths
// (this node's log and a relay, or relays to two nodes) keep no order between them. A batch
// that waits (for its topic's placement, for its topic's earlier batches, or routed again
// after a leadership move refused it: reroute) joins the awaiting queue, which the awaiter
// goroutine routes and dispatches in read order per topic.

// inFlight counts a topic's batches dispatched on a stream and not yet answered, and
// where they went ("" this node's log, or a node's name).
type inFlight struct {
	target string
	n      int
}

// mustAwait reports whether a batch of topic read now waits for its placement off the
// reader goroutine: in a replicated region, for a publish to a topic this node has not read
// the placement of (a client's: the awaiter goroutine the batch starts asks for the
// placement at once, ensure; a second ask from here would double what a creation costs;
// another node's relay: the placement is being applied here, and waiting for it on the
// reader would hold up every publish behind it on the relay stream), or to one with
// batches waiting already (so that a topic's batches keep their order).
func (p *publisher) mustAwait(topic string) bool {
	r := p.s.n.rep
	if r == nil {
		return false
	}
	if p.awaits(topic) {
		return true
	}
	return !r.placed(topic)
}

// awaits reports whether batches of topic wait in the awaiting queue.
func (p *publisher) awaits(topic string) bool {
	p.awaiting.Lock()
	defer p.awaiting.Unlock()
	return p.awaiting.topics[topic] > 0
}

// takeTurn counts b as dispatched to b.relayTo unless it must wait: batches of its topic
// wait already, or earlier ones went elsewhere and are not answered yet. The reader
// goroutine dispatches b at once when it returns true.
func (p *publisher) takeTurn(b *pendingBatch) bool {
	if p.s.n.rep == nil {
		return true // one log, one path
	}
	p.awaiting.Lock()
	defer p.awaiting.Unlock()
	if p.awaiting.topics[b.topic] > 0 {
		return false
	}
	return p.dispatchingLocked(b, b.relayTo)
}

// dispatchingLocked counts b as dispatched to target, unless the topic's batches in flight
// went to another target (awaiting's mutex held).
func (p *publisher) dispatchingLocked(b *pendingBatch, target string) bool {
	if p.awaiting.out == nil {
		p.awaiting.out = map[string]*inFlight{}
	}
	f := p.awaiting.out[b.topic]
	switch {
	case f == nil:
		f = &inFlight{target: target}
		p.awaiting.out[b.topic] = f
	case f.n > 0 && f.target != target && !rerouteUnordered:
		return false
	}
	f.target = target
	f.n++
	b.inFlight = true
	return true
}

// attemptEnded ends b's dispatch (its answer came, or its relay failed); moved, when not
// nil, is the refusal of the topic's group that did not append b because the leadership
// moved. It returns true when b was queued to be routed again (reroute) instead of being
// answered. Both happen under awaiting's mutex, so that no later batch of the topic is
// dispatched in between.
func (p *publisher) attemptEnded(b *pendingBatch, moved *wire.Error) bool {
	if p.s.n.rep == nil {
		return false
	}
	p.awaiting.Lock()
	defer p.awaiting.Unlock()
	if b.inFlight {
		b.inFlight = false
		if f := p.awaiting.out[b.topic]; f != nil {
			if f.n--; f.n <= 0 {
				delete(p.awaiting.out, b.topic)
			}
		}
		p.awaiting.cond.Broadcast()
	}
	if moved != nil && p.rerouteLocked(b, moved) {
		return true
	}
	if p.awaiting.topics[b.topic] > 0 {
		// A batch of the topic waits, perhaps one read before b and rerouted: it may not
		// be appended after b now (waitTurn).
		if p.awaiting.settled == nil {
			p.awaiting.settled = map[string]uint64{}
		}
		p.awaiting.settled[b.topic] = max(p.awaiting.settled[b.topic], b.order)
	}
	return false
}

// rerouteLocked queues b, which its topic's group refused (with e) before raft appended it
// because the leadership moved (replicatedError.moved), to be routed again, now to the new
// leader, ahead of its topic's later batches (those dispatched already, to the same place,
// are answered first: waitTurn): the client is not told, and nothing is stored twice since
// nothing was stored. It returns false when b has been rerouted for QuorumTimeout already:
// b is then refused.
func (p *publisher) rerouteLocked(b *pendingBatch, e *wire.Error) bool {
	now := time.Now()
	if b.rerouteUntil.IsZero() {
		b.rerouteUntil = now.Add(p.s.n.cfg.Raft.QuorumTimeout)
	}
	if now.After(b.rerouteUntil) || p.s.ctx.Err() != nil {
		return false
	}
	b.reroutes++
	b.moveErr = e
	p.s.n.rep.rerouted.Add(float64(len(b.seqs)))
	p.queueLocked(b)
	return true
}

// awaitPlacement queues b for the awaiter goroutine, which routes and dispatches the
// queued batches in read order per topic (b's topic not placed when it was read, or its
// earlier batches waiting or in flight elsewhere).
func (p *publisher) awaitPlacement(b *pendingBatch) {
	p.awaiting.Lock()
	defer p.awaiting.Unlock()
	p.queueLocked(b)
}

func (p *publisher) queueLocked(b *pendingBatch) {
	p.insertLocked(b)
	if p.awaiting.topics == nil {
		p.awaiting.topics = make(map[string]int)
	}
	p.awaiting.topics[b.topic]++
	if p.awaiting.workers[b.topic] {
		return
	}
	if p.awaiting.workers == nil {
		p.awaiting.workers = map[string]bool{}
	}
	p.awaiting.workers[b.topic] = true
	if p.parkLocked(b) {
		return // publishpark.go: released by the placement's apply, no goroutine meanwhile
	}
	p.startAwaiter(b.topic)
}

// startAwaiter starts topic's awaiter goroutine, waited for by run (waitAwaiter).
func (p *publisher) startAwaiter(topic string) {
	if r := p.s.n.rep; r != nil {
		r.awaiters.Add(1)
	}
	go p.awaiter(topic)
}

// insertLocked puts b in its topic's queue before the first batch read after it: at the
// end, but for a batch rerouted after later ones of its topic were queued.
func (p *publisher) insertLocked(b *pendingBatch) {
	if p.awaiting.q == nil {
		p.awaiting.q = make(map[string][]*pendingBatch)
	}
	q := p.awaiting.q[b.topic]
	i := len(q)
	for i > 0 && q[i-1].order > b.order {
		i--
	}
	p.awaiting.q[b.topic] = slices.Insert(q, i, b)
}

// takeLocked takes the first queued batch of topic, nil when none is queued.
func (p *publisher) takeLocked(topic string) *pendingBatch {
	q := p.awaiting.q[topic]
	if len(q) == 0 {
		return nil
	}
	b := q[0]
	if len(q) == 1 {
		delete(p.awaiting.q, topic)
	} else {
		q[0] = nil
		p.awaiting.q[topic] = q[1:]
	}
	return b
}

// queuedBeforeLocked reports whether a batch of b's topic read before b is queued.
func (p *publisher) queuedBeforeLocked(b *pendingBatch) bool {
	q := p.awaiting.q[b.topic]
	return len(q) > 0 && q[0].order < b.order
}

// waitAwaiter waits until every awaiter goroutine has nothing queued and has ended.
func (p *publisher) waitAwaiter() {
	p.awaiting.Lock()
	defer p.awaiting.Unlock()
	for len(p.awaiting.workers) > 0 {
		p.condLocked().Wait()
	}
}

func (p *publisher) condLocked() *sync.Cond {
	if p.awaiting.cond.L == nil {
		p.awaiting.cond.L = &p.awaiting.Mutex
	}
	return &p.awaiting.cond
}

// awaiter routes and dispatches the queued batches of topic, in read order, until none is
// queued: one goroutine per topic with batches queued, so that one topic waiting for its
// placement or its new leader holds up no other.
func (p *publisher) awaiter(topic string) {
	for p.awaitStep(topic, true) != stepEnded {
	}
}

// stepResult says what awaitStep did.
type stepResult int

const (
	stepEnded   stepResult = iota // nothing queued: topic's worker ended
	stepNext                      // a batch was handled (or queued again behind an earlier one)
	stepBlocked                   // !wait: the first batch would wait, and is queued again
)

// awaitStep routes and dispatches topic's first queued batch. With wait false (the
// releaser, publishpark.go) it does only what needs no waiting: a batch that would wait
// (routed again, its group's leader unknown, an earlier batch in flight elsewhere) is
// queued again and stepBlocked returned, for an awaiter goroutine to take over.
func (p *publisher) awaitStep(topic string, wait bool) stepResult {
	p.awaiting.Lock()
	b := p.takeLocked(topic)
	if b == nil {
		delete(p.awaiting.workers, topic)
		p.condLocked().Broadcast()
		p.awaiting.Unlock()
		return stepEnded
	}
	if !wait && (b.reroutes > 0 || b.back) {
		p.insertLocked(b)
		p.awaiting.Unlock()
		return stepBlocked
	}
	p.awaiting.Unlock()

	var owner string
	var e *wire.Error
	switch {
	case b.reroutes > 0 || b.back:
		owner, e = p.rerouteTo(b)
	case !wait:
		var ok bool
		if owner, e, ok = p.s.n.rep.routeNow(p.s.ctx, b.topic, p.s.peer, p.s.peerName); !ok {
			p.requeue(b)
			return stepBlocked
		}
		if e != nil && owner != "" && p.s.peer {
			p.requeue(b) // relayed here by the node this one takes for the leader: rerouted
			return stepBlocked
		}
	default:
		rep := p.s.n.rep
		unplaced := rep != nil && rep.n.cfg.Raft.PredictPlacement && !rep.placed(b.topic)
		owner, e = p.route(b.topic) // waits for the placement (ensure) and a leader
		b.predicted = unplaced && e == nil && owner != ""
		if e != nil && owner != "" && p.s.peer {
			// Relayed here by the node this one takes for the leader (add).
			b.back, b.rerouteUntil = true, time.Now().Add(p.s.n.cfg.Raft.QuorumTimeout)
			owner, e = p.rerouteTo(b)
		}
	}
	if e == nil {
		switch p.waitTurn(b, owner, wait) {
		case turnQueued:
			return stepNext // an earlier batch of its topic came back to the queue: b goes after it
		case turnBlocked:
			return stepBlocked
		case turnRefused:
			e = b.moveErr
		}
	}
	p.finishStep(b, owner, e)
	return stepNext
}

// requeue puts b, taken by awaitStep, back at its place in its topic's queue.
func (p *publisher) requeue(b *pendingBatch) {
	p.awaiting.Lock()
	p.insertLocked(b)
	p.awaiting.Unlock()
}

// finishStep answers b with e, or dispatches it to owner, and counts it off its topic's
// queue.
func (p *publisher) finishStep(b *pendingBatch, owner string, e *wire.Error) {
	if e != nil {
		p.mu.Lock()
		b.err, b.done = e, true
		b.dropRecords()
		p.mu.Unlock()
		p.signal()
	} else {
		b.relayTo = owner
		p.dispatchMu.Lock()
		p.dispatch(b)
		p.flushRelaysLocked()
		p.dispatchMu.Unlock()
	}
	p.awaiting.Lock()
	if p.awaiting.topics[b.topic]--; p.awaiting.topics[b.topic] <= 0 {
		delete(p.awaiting.topics, b.topic)
		delete(p.awaiting.settled, b.topic)
	}
	p.awaiting.Unlock()
}

// turn says whether a batch may be dispatched now (waitTurn).
type turn int

const (
	turnGo      turn = iota // counted as dispatched: dispatch it
	turnQueued              // queued again behind an earlier batch of its topic
	turnRefused             // refused with b.moveErr
	turnBlocked             // !wait: it would wait, and is queued again
)

// waitTurn waits until b, routed to owner, may be dispatched: no earlier batch of its topic
// is in flight elsewhere. It returns false, b queued again, when an earlier batch of the
// topic was queued meanwhile (rerouted). A rerouted b first waits for every batch of its
// topic in flight: if one read after b was appended meanwhile (or may have been: its
// outcome is unknown), appending b now would reorder the stream, and b is refused with
// the error that refused it (nothing was appended). That happens only when a leader lost
// its leadership with b uncommitted and won it back before b's loss was known (raft
// drops b, ErrDropped, and keeps what the new term took).
func (p *publisher) waitTurn(b *pendingBatch, owner string, wait bool) turn {
	p.awaiting.Lock()
	defer p.awaiting.Unlock()
	for {
		if p.queuedBeforeLocked(b) {
			p.insertLocked(b) // still counted in topics
			return turnQueued
		}
		f := p.awaiting.out[b.topic]
		switch {
		case b.reroutes > 0 && f != nil && f.n > 0 && !rerouteUnordered:
		case b.reroutes > 0 && p.awaiting.settled[b.topic] > b.order && !rerouteUnordered:
			return turnRefused
		case p.dispatchingLocked(b, owner):
			return turnGo
		}
		if !wait {
			p.insertLocked(b)
			return turnBlocked
		}
		// Answered within the relay's or the proposal's bound, or refused.
		p.condLocked().Wait()
	}
}
