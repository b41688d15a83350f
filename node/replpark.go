package node

import (
	"context"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
)

// Publishes parked until their topic is placed, with no goroutine or timer per topic.
//
// A publish to a topic the region has never seen waits for the metadata leader to place it.
// Each such wait used to be a goroutine of its own (the publisher's awaiter, in
// ensurePlaced) with a context and a poll timer: a client creating thousands of topics kept
// thousands of them on its node, which spent a third of its CPU on them and on growing
// their stacks (issue 29). A publish stream now parks a new topic here instead: the topic
// is asked for once (queued for the placer on the metadata leader, or in the batched ask to
// it: replask.go), and the apply of the metadata entry that places it (one entry places
// many topics) releases every stream that parked it. One goroutine, parkWatch, keeps what
// ensurePlaced's loop kept for each topic: it asks again when the metadata leader changed
// or refused the ask as Unavailable, and past QuorumTimeout it releases the topic with the
// error ensurePlaced would have given. A release only queues the topic on its stream
// (publisher.unpark), so it may be called with any lock held but the stream's inbox.

// parkedTopic is a topic waiting for its placement, with the streams that parked it.
type parkedTopic struct {
	topic   string
	relayed bool // another node's publish: asked for only if this node leads the metadata
	since   time.Time
	asked   uint64      // the metadata leader asked (0: asked at the next sweep)
	lastErr *wire.Error // the last Unavailable answer of a leader asked: the error at the deadline
	// notLeader: relayed, when this node first found another node leads the metadata.
	notLeader time.Time
	waiters   []func(*wire.Error)
	gone      bool // released: dropped from order at the next sweep
}

// parkResult says what park did.
type parkResult int

const (
	parkRefused parkResult = iota // the topic waits on the ensurePlaced path (a goroutine)
	parkPlaced                    // placed already: route it now
	parkParked                    // release is called once: nil when placed, or the error
)

// park parks topic until its placement is applied here: release is called once, with nil
// when it is placed, or with the error that ends the wait. It refuses what ensurePlaced
// must decide with the region's whole state (a region forming, a node outside its metadata
// group, predicted placements, one group per topic). With no metadata leader known (an
// election), the topic is parked and asked for at a sweep once one is (parkAsk).
func (r *replicated) park(topic string, relayed bool, release func(*wire.Error)) parkResult {
	if r.placed(topic) {
		return parkPlaced
	}
	if r.n.cfg.Raft.PredictPlacement || !r.manyGroups() {
		return parkRefused
	}
	if _, ok := r.d.Role(metaGroup); !ok {
		return parkRefused
	}
	r.mu.Lock()
	ready := r.mu.formed && r.mu.outside == nil
	r.mu.Unlock()
	if !ready {
		return parkRefused
	}
	r.parked.Lock()
	if r.parked.stopped {
		r.parked.Unlock()
		return parkRefused
	}
	if pt := r.parked.m[topic]; pt != nil {
		pt.waiters = append(pt.waiters, release) // asked for by another stream already
		r.parked.Unlock()
		return parkParked
	}
	pt := &parkedTopic{topic: topic, relayed: relayed, since: time.Now(), waiters: []func(*wire.Error){release}}
	if r.parked.m == nil {
		r.parked.m = map[string]*parkedTopic{}
	}
	r.parked.m[topic] = pt
	r.parked.order = append(r.parked.order, pt)
	r.parked.Unlock()
	select {
	case r.parked.wake <- struct{}{}:
	default:
	}
	if r.placed(topic) {
		// Placed between the first look and the registration: its apply may have looked
		// for parked topics before this one was.
		r.unparkPlaced([]string{topic})
		return parkParked
	}
	r.parkAsk(pt)
	return parkParked
}

// parkAsk asks the metadata leader known now to place pt's topic, as askToPlace does for
// ensurePlaced: this node, when it leads (queued for the placer); the leader, in a batched
// ask; nobody for another node's publish, whose sender asked.
func (r *replicated) parkAsk(pt *parkedTopic) {
	r.parked.Lock()
	gone := pt.gone
	r.parked.Unlock()
	if gone {
		return
	}
	ro, _ := r.d.Role(metaGroup)
	lead := ro.Lead
	n := r.n
	switch {
	case lead == 0:
		return // asked at a sweep once a leader is known
	case lead == r.id:
		r.mu.Lock()
		ctx := r.mu.ctx
		r.mu.Unlock()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
		e := r.place(ctx, pt.topic, 0)
		cancel()
		if e != nil {
			r.unparkWith(pt.topic, e)
			return
		}
	case pt.relayed:
		r.parked.Lock()
		if pt.notLeader.IsZero() {
			pt.notLeader = time.Now()
		}
		r.parked.Unlock()
		return
	default:
		topic := pt.topic
		r.askBatchedThen(lead, topic, func(e *wire.Error) { r.parkAnswered(topic, lead, e) })
	}
	r.parked.Lock()
	pt.asked = lead
	r.parked.Unlock()
}

// parkAnswered takes the metadata leader's answer to a parked topic's ask: placed (its
// apply releases it), refused for good (released with the refusal), or Unavailable (asked
// again at the next sweep; the error is the one given at the deadline).
func (r *replicated) parkAnswered(topic string, lead uint64, e *wire.Error) {
	if e == nil {
		return
	}
	if e.Code != wire.CodeUnavailable {
		r.unparkWith(topic, e)
		return
	}
	r.parked.Lock()
	defer r.parked.Unlock()
	if pt := r.parked.m[topic]; pt != nil && pt.asked == lead {
		pt.lastErr, pt.asked = e, 0
	}
}

// takeParkedLocked removes topic's parked entry and returns its waiters (r.parked held).
func (r *replicated) takeParkedLocked(topic string) []func(*wire.Error) {
	pt := r.parked.m[topic]
	if pt == nil {
		return nil
	}
	delete(r.parked.m, topic)
	pt.gone = true
	return pt.waiters
}

// unparkPlaced releases the streams parked on topics, which this node has just placed (the
// apply of a metadata record, after r.pl is unlocked).
func (r *replicated) unparkPlaced(topics []string) {
	var release []func(*wire.Error)
	r.parked.Lock()
	if len(r.parked.m) > 0 {
		for _, topic := range topics {
			release = append(release, r.takeParkedLocked(topic)...)
		}
	}
	r.parked.Unlock()
	for _, f := range release {
		f(nil)
	}
}

// unparkWith releases topic's streams with e.
func (r *replicated) unparkWith(topic string, e *wire.Error) {
	r.parked.Lock()
	release := r.takeParkedLocked(topic)
	r.parked.Unlock()
	for _, f := range release {
		f(e)
	}
}

// parkWatch is the goroutine that keeps the parked topics' asks and deadlines: every
// slowPoll while any is parked, or at the first deadline. When the node stops, every
// parked topic is released with that.
func (r *replicated) parkWatch(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.parked.Lock()
		next := time.Duration(-1)
		if len(r.parked.order) > 0 {
			next = r.slowPoll()
			if first := r.parked.order[0]; !first.gone {
				next = min(next, time.Until(first.since.Add(r.n.cfg.Raft.QuorumTimeout)))
			}
		}
		r.parked.Unlock()
		var tick <-chan time.Time
		if next >= 0 {
			timer.Reset(max(next, time.Millisecond))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			r.stopParked()
			return
		case <-r.parked.wake:
			timer.Stop()
			continue
		case <-tick:
		}
		r.sweepParked(time.Now())
	}
}

// sweepParked releases the parked topics past their deadline and asks again for those whose
// ask went to a metadata leader that lost its office or was refused.
func (r *replicated) sweepParked(now time.Time) {
	ro, _ := r.d.Role(metaGroup)
	c := r.n.cfg.Raft
	type ended struct {
		pt      *parkedTopic
		e       *wire.Error
		timeout bool
	}
	var done []ended
	var ask []*parkedTopic
	r.parked.Lock()
	keep := r.parked.order[:0]
	for _, pt := range r.parked.order {
		if pt.gone {
			continue
		}
		switch {
		case !now.Before(pt.since.Add(c.QuorumTimeout)):
			done = append(done, ended{pt, pt.lastErr, pt.lastErr == nil})
		case pt.relayed && !pt.notLeader.IsZero() && pt.asked == 0 &&
			now.Sub(pt.notLeader) > c.TickInterval*time.Duration(c.ElectionTicks):
			done = append(done, ended{pt, wire.Errorf(wire.CodeUnavailable, "topic %q: node %q no longer leads region %q's metadata; retry", pt.topic, r.n.cfg.Name, r.n.cfg.Region), false})
		default:
			if pt.asked != 0 && pt.asked != ro.Lead {
				pt.asked = 0 // the leader asked lost its office before placing the topic
			}
			if pt.asked == 0 {
				ask = append(ask, pt)
			}
			keep = append(keep, pt)
			continue
		}
		delete(r.parked.m, pt.topic)
		pt.gone = true
	}
	clear(r.parked.order[len(keep):])
	r.parked.order = keep
	r.parked.Unlock()
	for _, d := range done {
		e := d.e
		switch {
		case r.placed(d.pt.topic):
			e = nil // placed at the deadline: routed as any
		case d.timeout:
			e = r.notPlacedError(d.pt.topic)
		}
		for _, f := range d.pt.waiters {
			f(e)
		}
	}
	for _, pt := range ask {
		r.parkAsk(pt)
	}
}

// stopParked releases every parked topic with the node's shutdown and parks no more.
func (r *replicated) stopParked() {
	r.parked.Lock()
	r.parked.stopped = true
	var release []func(*wire.Error)
	for topic := range r.parked.m {
		release = append(release, r.takeParkedLocked(topic)...)
	}
	r.parked.order = nil
	r.parked.Unlock()
	e := wire.Errorf(wire.CodeShuttingDown, "node shutting down")
	for _, f := range release {
		f(e)
	}
}
