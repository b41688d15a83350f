package node

import (
	"github.com/quicmq/quicmq/internal/wire"
)

// A publish stream's batches of topics the region has not placed yet, parked without a
// goroutine each (replpark.go).
//
// The first batch of such a topic is parked with the replicated part, which asks for the
// placement; its topic's later batches queue behind it as any (awaiting). The placement's
// apply (or the error that ends the wait) releases the topic into the stream's inbox, and
// one releaser goroutine per stream, alive while releases are pending, routes and
// dispatches the released topics' batches that need no waiting (awaitStep with wait
// false). A topic whose batch would wait (its group has no leader yet, an earlier batch in
// flight elsewhere, a reroute) goes on on an awaiter goroutine of its own, as before.

// parkInbox is a publish stream's parked topics and the releases waiting for its releaser.
// Its mutex is taken last, after any other lock: a release is called with the replicated
// part's locks or the stream's awaiting lock held.
type parkInbox struct {
	parked  map[string]bool // topics parked by this stream and not yet released
	ready   []parkRelease
	running bool // a releaser goroutine runs (on parkWG)
}

type parkRelease struct {
	topic string
	e     *wire.Error
}

// parkLocked parks b, the first batch queued of a topic this node has not read the
// placement of, until the placement is applied here, instead of starting an awaiter
// goroutine for it (awaiting's mutex held, the topic's worker marked). False when b must
// wait on an awaiter goroutine.
func (p *publisher) parkLocked(b *pendingBatch) bool {
	rep := p.s.n.rep
	if rep == nil || b.reroutes > 0 || b.back || rep.placed(b.topic) {
		// A placed topic's batches wait here only behind its earlier ones (in flight
		// elsewhere, rerouted after a leadership move): on an awaiter, as before.
		return false
	}
	if parkOff {
		rep.unparked.Add(1)
		return false
	}
	topic := b.topic
	p.inbox.Lock()
	if p.inbox.parked == nil {
		p.inbox.parked = map[string]bool{}
	}
	p.inbox.parked[topic] = true
	p.inbox.Unlock()
	switch rep.park(topic, p.s.peer, func(e *wire.Error) { p.unpark(topic, e) }) {
	case parkParked:
		return true
	case parkPlaced:
		p.unpark(topic, nil)
		return true
	}
	p.inbox.Lock()
	delete(p.inbox.parked, topic)
	p.inbox.Unlock()
	rep.unparked.Add(1)
	return false
}

// unpark releases topic, parked by this stream: nil once placed, or the error that ends
// its wait. A second release of it (the stream gave it up first: cancelParks) is dropped.
func (p *publisher) unpark(topic string, e *wire.Error) {
	p.inbox.Lock()
	defer p.inbox.Unlock()
	if !p.inbox.parked[topic] {
		return
	}
	delete(p.inbox.parked, topic)
	p.inbox.ready = append(p.inbox.ready, parkRelease{topic, e})
	if !p.inbox.running {
		p.inbox.running = true
		p.parkWG.Go(p.releaser)
	}
}

// cancelParks releases every topic this stream parked with e: its session ended, and its
// run waits for every batch to be answered.
func (p *publisher) cancelParks(e *wire.Error) {
	p.inbox.Lock()
	var topics []string
	for topic := range p.inbox.parked {
		topics = append(topics, topic)
	}
	p.inbox.Unlock()
	for _, topic := range topics {
		p.unpark(topic, e)
	}
}

// releaser routes and dispatches the released topics' batches until none is pending.
func (p *publisher) releaser() {
	for {
		p.inbox.Lock()
		ready := p.inbox.ready
		p.inbox.ready = nil
		if len(ready) == 0 {
			p.inbox.running = false
			p.inbox.Unlock()
			return
		}
		p.inbox.Unlock()
		for _, rl := range ready {
			p.release(rl.topic, rl.e)
		}
	}
}

// release goes on with topic's queued batches once its wait ended: with e, the first one
// is refused with it (each later one routes on its own, as it would have); placed, each is
// routed and dispatched here while that needs no waiting, and the rest on an awaiter.
func (p *publisher) release(topic string, e *wire.Error) {
	if e != nil {
		p.awaiting.Lock()
		b := p.takeLocked(topic)
		p.awaiting.Unlock()
		if b != nil {
			p.finishStep(b, "", e)
		}
	} else {
		for {
			switch p.awaitStep(topic, false) {
			case stepEnded:
				return
			case stepBlocked:
				p.startAwaiter(topic)
				return
			}
		}
	}
	p.awaiting.Lock()
	defer p.awaiting.Unlock()
	if len(p.awaiting.q[topic]) == 0 {
		delete(p.awaiting.workers, topic)
		p.condLocked().Broadcast()
		return
	}
	p.startAwaiter(topic)
}

// parkOff turns parking off (every waiting topic gets an awaiter goroutine, as before):
// set it to true to see TestParkedCreationsHoldNoGoroutines fail.
const parkOff = false
