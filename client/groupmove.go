package client

import (
	"slices"
	"sync"
	"sync/atomic"
)

// A group member that moves to another region (Options.Failover).
//
// A group's position is kept on the node and mirrored to the other regions with its topics
// (docs/architecture.md, "Portable positions"): a member that fails over joins the group
// there, and the group resumes from the newest state of it mirrored from the lost region. What
// the group acknowledged after that state was mirrored (the mirroring lag), and what it had
// handed out and not acknowledged, is delivered again there. A member does not send a vector
// of its own: a group acknowledges record by record, across members, so what one member
// acknowledged is no prefix of the topic and says nothing of the records the others hold.
// Instead the member remembers, by origin region and origin offset, the records it
// acknowledged, and once its stream was made again (a move, or a reconnect in its region) it
// acknowledges a redelivery of one of them at once instead of returning it (counted:
// Subscription.Redelivered). So a group of one member fails over exactly
// once; a group of several gets every record at least once, a record acknowledged by one
// member before the move and not yet mirrored possibly again to another.
//
// An Ack of a record delivered in a region the member has left is not sent (its offset means
// nothing in the new region), only remembered; nor is one that finds the stream lost.

// maxGroupAcked bounds the runs of acknowledged origin offsets a member remembers over all its
// topics and origins (a member acknowledging in order holds one run per topic and origin); past
// it the oldest run of the origin acknowledged is forgotten, and a redelivery of one of its
// records is returned again.
const maxGroupAcked = 1 << 16

// groupMoves is a group member's memory of what it acknowledged, for a move.
type groupMoves struct {
	mu    sync.Mutex
	gen   uint32 // from 1, increases at each move to another region
	moved bool   // the stream was made again at least once: redeliveries are checked
	acked map[string]map[string][]ackedRun
	runs  int

	redelivered atomic.Uint64 // redeliveries of acknowledged records dropped after a move
}

// ackedRun is a run of acknowledged origin offsets, first to last.
type ackedRun struct{ first, last uint64 }

func newGroupMoves() *groupMoves {
	return &groupMoves{gen: 1, acked: make(map[string]map[string][]ackedRun)}
}

// deliver stamps r with the current region's generation, and reports whether r is a
// redelivery of a record acknowledged before a move (to be acknowledged, not returned).
func (g *groupMoves) deliver(r *Record) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	r.gen = g.gen
	if !g.moved {
		return false
	}
	runs := g.acked[r.Topic][r.OriginRegion]
	_, found := slices.BinarySearchFunc(runs, r.OriginOffset, func(a ackedRun, off uint64) int {
		switch {
		case a.last < off:
			return -1
		case a.first > off:
			return 1
		}
		return 0
	})
	if found {
		g.redelivered.Add(1)
	}
	return found
}

// ack remembers r as acknowledged and reports whether its ACK is to be sent: not for a record
// of a region the member has left.
func (g *groupMoves) ack(r Record) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	origins := g.acked[r.Topic]
	if origins == nil {
		origins = make(map[string][]ackedRun)
		g.acked[r.Topic] = origins
	}
	runs, added := insertRun(origins[r.OriginRegion], r.OriginOffset)
	g.runs += added
	if g.runs > maxGroupAcked && len(runs) > 1 {
		runs = runs[1:]
		g.runs--
	}
	origins[r.OriginRegion] = runs
	return r.gen == 0 || r.gen == g.gen
}

// insertRun adds off to runs (sorted, disjoint, not adjacent) and returns them with the
// change in their number.
func insertRun(runs []ackedRun, off uint64) ([]ackedRun, int) {
	n := len(runs)
	if n > 0 && runs[n-1].last+1 == off { // in order: the usual case
		runs[n-1].last = off
		return runs, 0
	}
	i, _ := slices.BinarySearchFunc(runs, off, func(a ackedRun, off uint64) int {
		if a.last < off {
			return -1
		}
		return 1
	})
	// runs[i] is the first run whose last is at or past off.
	if i < n && runs[i].first <= off {
		return runs, 0 // acknowledged already
	}
	joinLeft := i > 0 && runs[i-1].last+1 == off
	joinRight := i < n && runs[i].first == off+1
	switch {
	case joinLeft && joinRight:
		runs[i-1].last = runs[i].last
		return slices.Delete(runs, i, i+1), -1
	case joinLeft:
		runs[i-1].last = off
		return runs, 0
	case joinRight:
		runs[i].first = off
		return runs, 0
	}
	return slices.Insert(runs, i, ackedRun{off, off}), 1
}

// resumed says the member's stream was made again: redeliveries of records it acknowledged
// are checked from now on (an ACK may have been lost with the stream).
func (g *groupMoves) resumed() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.moved = true
}

// movedRegion starts a new region: records delivered before are no longer acknowledged to the
// node (their offsets mean nothing there).
func (g *groupMoves) movedRegion() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	g.moved = true
}

// Redelivered returns how many records a group member dropped, since it was made, because
// they were redelivered after a move to another region (Options.Failover) and it had
// acknowledged them before: the duplicates the failover would have caused. 0 for other
// subscriptions.
func (s *Subscription) Redelivered() uint64 {
	if s.gm == nil {
		return 0
	}
	return s.gm.redelivered.Load()
}
