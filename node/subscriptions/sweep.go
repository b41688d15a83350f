package subscriptions

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"sync/atomic"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Wildcard subscriptions served from this node's logs read them as one sweep (issue 35):
// what a subscription costs grows with what it reads, not with how many topics match.
//
//   - A matched topic with nothing unread has no cursor at all. The node learns of every
//     advance of every topic's high-watermark from the log (wal.Log.OnAdvance: one function
//     for the node, no registration per topic) and passes it to the wildcard subscriptions
//     whose pattern matches (wildSet, a routing.Table), which note the topic and the
//     high-watermark before the advance (the subscription's inbox) and wake. The subscription registers
//     itself right before it lists the topics (wal.Log.TopicsWhile, which lets appends
//     through between chunks of the listing), so every advance after the registration is
//     noted, and the high-watermark before a topic's first noted advance is the topic's at
//     the registration: set-up takes it as the listed topic's head (the listing may show the
//     advance too), and a noted topic without a cursor reads from it, which is where its
//     start position was when the subscription began.
//   - A topic with records to read gets a cursor (a position and its topic's log instance,
//     no iterator, tail, timer or goroutine) and is active until the cursor reaches the
//     high-watermark; only active cursors are visited, in the order of their topic IDs.
//   - The reads of a round go through one wal.Sweep: one Pebble iterator over the record
//     keyspace, which steps from one topic's records to the next topic's without a seek
//     when they follow each other, and is released, like a Scanner's, while the
//     subscription waits. Frames of many topics share a batch of about ReadAhead bytes.
//
// Each topic's records still go out in offset order, with GAP frames for records retention
// deleted, and never past the durable high-watermark (I3: a Sweep's reads stop there).
// Across topics a round goes through the active topics in the order of their IDs (the
// order in which the node first stored them), at most ReadAhead bytes of one topic per
// round.

// WildSet is the node's wildcard subscriptions that read by sweep, by pattern. Safe for
// concurrent use; its function Advanced runs on the log's completer with the log's lock
// held, so it only notes and wakes.
type WildSet struct {
	subs    *routing.Table[*Subscription]
	n       atomic.Int64 // subscriptions in subs: advanced does nothing when there are none
	cursors atomic.Int64 // the cursors of the sweep subscriptions, all together (tests)
}

// NewWildSet makes an empty set.
func NewWildSet() *WildSet { return &WildSet{subs: routing.NewTable[*Subscription]()} }

// Cursors is the cursors of the sweep subscriptions, all together (tests).
func (ws *WildSet) Cursors() int64 { return ws.cursors.Load() }

// Advanced is the log's OnAdvance function: it notes the advance (from == to: a purge, cut
// or delete) on every sweep subscription whose pattern matches topic.
func (ws *WildSet) Advanced(topic string, id uint32, from, to uint64) {
	if ws.n.Load() == 0 {
		return
	}
	for _, sub := range ws.subs.Match(topic) {
		sub.in.advanced(topic, id, from, from == to)
	}
}

// noMove is the value of a noted topic that changed without an advance (a purge, cut or
// delete): it wakes a cursor on it but makes none.
const noMove = math.MaxUint64

// sweepState is what a sweep subscription keeps beside its cursors. Owned by the run
// goroutine (subRun).
type sweepState struct {
	on     bool       // the subscription reads by sweep
	sw     *wal.Sweep // its reads
	active []*cursor  // the cursors with records to read, in ID order once sorted
	sorted bool       // active is in ID order
	opened int        // cursors made so far (tests)
	// The cursors by topic ID: those of the topics with records to read at set-up, in ID
	// order (found by a binary search: nothing per topic goes into a map), and those made
	// since. setUp[:made] are made; the rest are made from pending as the rounds go (at
	// most sweepChunk a round), so the first records go out before every cursor is made.
	setUp   []cursor
	pending []wal.ListedTopic // each of setUp's topic, its First where the cursor starts; nil once all are made
	stored  []uint64          // beside pending: the cursor's stored (startOffset); nil: all 0
	made    int
	later   map[uint32]*cursor
}

// note is what the inbox keeps of a sweep's topic that advanced: its name and the
// high-watermark before its first noted advance (noMove: changed without one).
type note struct {
	topic string
	from  uint64
}

// sweepChunk is how many of the cursors of set-up a round makes.
const sweepChunk = 4096

// sweepCursor returns the cursor on the topic with ID id, or nil. Run goroutine.
func (sub *subRun) sweepCursor(id uint32) *cursor {
	st := &sub.sweep
	if i, ok := slices.BinarySearchFunc(st.setUp[:st.made], id, func(c cursor, id uint32) int { return cmp.Compare(c.id, id) }); ok {
		return &st.setUp[i]
	}
	if j, ok := slices.BinarySearchFunc(st.pending[min(st.made, len(st.pending)):], id, func(t wal.ListedTopic, id uint32) int { return cmp.Compare(t.ID, id) }); ok {
		i := st.made + j
		sub.makeSetUp(i + 1)
		return &st.setUp[i]
	}
	return st.later[id]
}

// makeSetUp makes the cursors of set-up up to (not including) setUp[upTo], in order, taking
// the subscription's lock once for all of them. Run goroutine.
func (sub *subRun) makeSetUp(upTo int) {
	st := &sub.sweep
	from := st.made
	upTo = min(upTo, len(st.pending))
	for ; st.made < upTo; st.made++ {
		p := &st.pending[st.made]
		c := &st.setUp[st.made]
		var stored uint64
		if st.stored != nil {
			stored = st.stored[st.made]
		}
		sub.fillSweepCursor(c, p.Name, p.Instance, p.ID, p.First, stored)
		if sub.caughtUp {
			sub.catchUp[c] = p.Next
		}
	}
	if from < upTo {
		sub.mu.Lock()
		for i := from; i < upTo; i++ {
			sub.mu.curs = append(sub.mu.curs, &st.setUp[i])
		}
		sub.mu.Unlock()
		st.opened += upTo - from
		sub.h.wild.cursors.Add(int64(upTo - from))
	}
	if st.made >= len(st.pending) {
		st.pending, st.stored = nil, nil // all made (none at all: an empty pending is nil too)
	}
}

// sweepable reports whether the subscription reads by sweep: a wildcard served from this
// node's logs alone. Literal topics keep their cursor per topic with the shared tail and
// the fanout (node/tail); a wildcard that gathers other nodes' topics too
// (upstream.go) keeps it as well.
func (sub *subRun) sweepable() bool {
	return !routing.IsLiteral(sub.req.Pattern) && sub.owner == "" && !sub.spansRegion()
}

// setUpSweep registers the subscription for advances and makes cursors for the matching
// topics that have records to read from its start position; the others get none. It
// returns a function that ends the registration. Run goroutine.
func (sub *subRun) setUpSweep() (func(), *wire.Error) {
	n := sub.h
	sub.sweep.on = true
	sub.sweep.sw = n.wal.NewSweep()
	var addErr error
	topics := n.wal.TopicsWhile(func() {
		if addErr = n.wild.subs.Add(sub.req.Pattern, sub.Subscription); addErr == nil {
			n.wild.n.Add(1)
		}
	})
	if addErr != nil {
		return func() {}, &wire.Error{Code: wire.CodeInvalidTopic, Message: addErr.Error()}
	}
	stop := func() {
		if n.wild.subs.Remove(sub.req.Pattern, sub.Subscription) {
			n.wild.n.Add(-1)
		}
		n.wild.cursors.Add(-int64(sub.sweep.opened))
	}
	match, err := routing.NewMatcher(sub.req.Pattern)
	if err != nil {
		return stop, &wire.Error{Code: wire.CodeInvalidTopic, Message: err.Error()}
	}
	// The listing was taken a chunk at a time after the registration: a topic that advanced
	// meanwhile may show it, and is noted too. Its head as of the registration, where its
	// start is taken from, is the high-watermark before its first noted advance.
	notes := sub.in.peekAdvances()
	if len(notes) > 0 {
		for i := range topics {
			if nt, ok := notes[topics[i].ID]; ok && nt.from != noMove && nt.topic == topics[i].Name {
				topics[i].Next = nt.from
			}
		}
	}
	// The topics with records to read move to the front of the listing, in place (nothing
	// per topic is allocated again), their First set to where their cursor starts.
	k := 0
	minID, maxID := uint32(math.MaxUint32), uint32(0)
	for i := range topics {
		t := topics[i]
		if !match.Match(t.Name) {
			continue
		}
		if sub.caughtUp {
			sub.setupN++
		}
		var next, stored uint64
		switch {
		case sub.req.Durable == "" && sub.vec.want == nil && sub.req.Start == wire.StartEarliest:
			next = t.First
		case sub.req.Durable == "" && sub.vec.want == nil && sub.req.Start == wire.StartLatest:
			next = t.Next
		default:
			sub.head = t.Next // the start of a latest subscription (startOffset)
			var err *wire.Error
			if next, stored, err = sub.startOffset(t.Name, false); err != nil {
				return stop, err
			}
		}
		if next == t.Next {
			continue // nothing to read: its first noted advance says where it starts
		}
		if stored != 0 && sub.sweep.stored == nil {
			sub.sweep.stored = make([]uint64, len(topics))
		}
		if sub.sweep.stored != nil {
			sub.sweep.stored[k] = stored
		}
		t.First = next
		topics[k] = t
		k++
		minID, maxID = min(minID, t.ID), max(maxID, t.ID)
	}
	sub.head = 0
	starts := topics[:k]
	clear(topics[k:]) // holds no topic's log through the array
	if sub.sweep.stored != nil {
		sub.sweep.stored = sub.sweep.stored[:k]
	}
	// In ID order, as the sweep reads them, and side by side in memory.
	if k > 0 {
		if k < len(topics)/2 {
			// Most matched topics have nothing to read: pending keeps a copy of its own,
			// not the whole listing's array.
			starts = slices.Clone(starts)
		}
		sub.sweep.pending = sortByID(starts, sub.sweep.stored, minID, maxID)
	} else {
		sub.sweep.stored = nil // pending stays nil: nothing to make, CAUGHT_UP can go at once
	}
	sub.sweep.setUp = make([]cursor, k)
	sub.cursors = slices.Grow(sub.cursors, k)
	sub.mu.Lock()
	sub.mu.curs = slices.Grow(sub.mu.curs, k)
	sub.mu.bound = slices.Grow(sub.mu.bound, k)
	sub.mu.Unlock()
	return stop, nil
}

// newSweepCursor makes an active cursor on topic, whose log is in, at next (stored as
// startOffset returns it). Run goroutine.
func (sub *subRun) newSweepCursor(topic string, in wal.Instance, next, stored uint64) *cursor {
	c := new(cursor)
	sub.fillSweepCursor(c, topic, in, in.ID(), next, stored)
	sub.mu.Lock()
	sub.mu.curs = append(sub.mu.curs, c)
	sub.mu.Unlock()
	sub.sweep.opened++
	sub.h.wild.cursors.Add(1)
	if sub.sweep.later == nil {
		sub.sweep.later = make(map[uint32]*cursor)
	}
	sub.sweep.later[c.id] = c
	return c
}

// fillSweepCursor makes c, a cursor not yet used, an active cursor on topic; the caller
// adds it to the subscription's mu.curs and counts it.
func (sub *subRun) fillSweepCursor(c *cursor, topic string, in wal.Instance, id uint32, next, stored uint64) {
	*c = cursor{topic: topic, inst: in, id: id, next: next, stored: stored, pub: next}
	if sub.vec.want != nil {
		c.skip = sub.vec.skip(topic)
	}
	sub.beginStored(topic, next, stored > 0) // vector.go
	sub.cursors = append(sub.cursors, c)
	sub.activate(c)
}

// sortByID sorts ts by ID, and stored (nil, or beside ts) with it, and returns ts. The IDs
// of a log's topics are handed out densely in creation order, so where they span no more
// than a few times their number they are placed by ID in one pass (no comparisons, which
// for 100,000 topics took most of a sweep's set-up), else sorted.
func sortByID(ts []wal.ListedTopic, stored []uint64, minID, maxID uint32) []wal.ListedTopic {
	if len(ts) < 2 {
		return ts
	}
	span := uint64(maxID-minID) + 1
	if span > 4*uint64(len(ts)) {
		idx := make([]int32, len(ts))
		for i := range idx {
			idx[i] = int32(i)
		}
		slices.SortFunc(idx, func(a, b int32) int { return cmp.Compare(ts[a].ID, ts[b].ID) })
		return permute(ts, stored, idx)
	}
	slot := make([]int32, span) // 1 + the index in ts of the topic with ID minID+j; 0: none
	for i := range ts {
		slot[ts[i].ID-minID] = int32(i) + 1
	}
	idx := make([]int32, 0, len(ts))
	for _, i := range slot {
		if i != 0 {
			idx = append(idx, i-1)
		}
	}
	return permute(ts, stored, idx)
}

// permute returns ts in the order idx gives (idx[j]: the index in ts of the j-th), and
// reorders stored (nil, or beside ts) the same way. It moves the entries in place, cycle by
// cycle (idx is used up: -1 marks a placed entry), so a set-up of 100,000 topics makes no
// second copy of its listing.
func permute(ts []wal.ListedTopic, stored []uint64, idx []int32) []wal.ListedTopic {
	for j := range idx {
		if idx[j] < 0 {
			continue
		}
		if int(idx[j]) == j {
			idx[j] = -1
			continue
		}
		t := ts[j]
		var st uint64
		if stored != nil {
			st = stored[j]
		}
		k := j
		for {
			src := int(idx[k])
			idx[k] = -1
			if src == j {
				ts[k] = t
				if stored != nil {
					stored[k] = st
				}
				break
			}
			ts[k] = ts[src]
			if stored != nil {
				stored[k] = stored[src]
			}
			k = src
		}
	}
	return ts
}

// activate puts c among the cursors a round reads. Run goroutine.
func (sub *subRun) activate(c *cursor) {
	if c.active {
		return
	}
	c.active = true
	if k := len(sub.sweep.active); k > 0 && sub.sweep.active[k-1].id > c.id {
		sub.sweep.sorted = false
	}
	sub.sweep.active = append(sub.sweep.active, c)
}

// takeDirty activates the cursors of the topics noted since the last call, and makes
// cursors for the noted topics that have none, each at the high-watermark before its
// first noted advance. Run goroutine.
func (sub *subRun) takeDirty() {
	for id, nt := range sub.in.takeAdvances() {
		if c := sub.sweepCursor(id); c != nil {
			sub.activate(c)
			continue
		}
		if nt.from == noMove {
			continue // a topic with nothing unread was purged, cut or deleted
		}
		in := sub.h.wal.Instance(nt.topic)
		if !in.Valid() || in.ID() != id {
			continue // deleted since: a topic created under its name has notes of its own
		}
		var stored uint64
		if sub.req.Durable != "" {
			// Its stored position, if any, is where it was at the start: nothing of the
			// topic was delivered since, so nothing was acknowledged.
			if resume, ok, err := sub.h.wal.Resume(sub.req.Durable, nt.topic); err == nil && ok {
				stored = resume
			}
		}
		sub.newSweepCursor(nt.topic, in, nt.from, stored)
	}
}

// sendSwept is sendAvailable for a sweep subscription: it reads the active cursors'
// records through the subscription's Sweep, in topic ID order, at most ReadAhead bytes
// of one topic per round, and writes them in batches of about ReadAhead bytes. A cursor
// that reaches its topic's high-watermark leaves the active set.
func (sub *subRun) sendSwept() (int, *wire.Error) {
	n := sub.h
	sub.makeSetUp(sub.sweep.made + sweepChunk)
	sub.takeDirty()
	st := &sub.sweep
	if !st.sorted {
		slices.SortFunc(st.active, func(a, b *cursor) int { return cmp.Compare(a.id, b.id) })
		st.sorted = true
	}
	sent := 0
	records, bytes := 0, 0 // for the series, added once per round
	keep := st.active[:0]
	defer func() {
		clear(st.active[len(keep):]) // the cursors that left hold nothing through the array
		st.active = keep
		sub.series.records.Add(float64(records))
		sub.series.bytes.Add(float64(bytes))
	}()
	for i, c := range st.active {
		budget := max(n.cfg.ReadAhead-sub.w.Buffered(), 1)
		sub.enc, sub.encBytes = c, 0
		sub.holding = true
		got, more, err := st.sw.ReadFunc(c.inst, c.next, maxReadRecords, budget, sub.scanFn)
		if got > 0 {
			sub.delivered(c) // subscribe.go: before the batch is written
			sent += got
			records += got
			bytes += sub.encBytes
		}
		oor, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
		switch {
		case err == nil:
		case isOOR:
			sub.skipDeleted(c, oor.First) // subscribe.go
			sent++
			more = true
		case errors.Is(err, wal.ErrUnknownTopic):
			more = false
		case errors.Is(err, wal.ErrTopicDeleted):
			keep = append(keep, st.active[i:]...)
			return sent, wire.Errorf(wire.CodeTopicDeleted, "topic %q was deleted (quicmq topics delete); subscribe again to read a topic created under its name", sub.actor.ClientName(c.topic))
		case errors.Is(err, wal.ErrClosed):
			keep = append(keep, st.active[i:]...)
			return sent, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		default:
			keep = append(keep, st.active[i:]...)
			n.log.Error("subscription read failed", "topic", c.topic, "offset", c.next, "err", err)
			return sent, wire.Errorf(wire.CodeInternal, "read %q at offset %d: %v", c.topic, c.next, err)
		}
		if more {
			keep = append(keep, c)
		} else {
			c.active = false
		}
		// A batch of about ReadAhead bytes, of as many topics as it takes: written before
		// the next is read, so the read-ahead bounds what the subscription holds.
		if sub.w.Buffered() >= n.cfg.ReadAhead {
			if sub.flush() != nil {
				keep = append(keep, st.active[i+1:]...)
				return sent, errStreamGone
			}
		}
	}
	if st.pending != nil && sent == 0 {
		sent = 1 // cursors of set-up are still to be made: another round, not a wait
	}
	return sent, nil
}
