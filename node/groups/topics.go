package groups

import (
	"context"
	"slices"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// The topics a group follows: listing and adding them (when it starts, and as they are
// created), where it starts on each, dropping and purging them, and which of them the next
// dispatch looks at. Every function here whose name ends in Locked runs with g.mu held.

// RefreshTopics adds the topics created since it last looked that match the group's pattern
// and that it does not follow yet. It looks only at those (wal.Log.CreatedSince), so a group
// over a wildcard does not list every topic of the node at each new one.
func (g *Group) RefreshTopics() {
	g.mu.Lock()
	mark := g.mu.created
	g.mu.Unlock()
	names, next := g.env.Wal.CreatedSince(mark)
	g.mu.Lock()
	g.mu.created = max(g.mu.created, next) // members refresh concurrently: never back
	g.mu.Unlock()
	for _, name := range names {
		if in := g.env.Wal.Instance(name); in.Valid() { // else deleted since
			g.addIfMatches(name, in)
		}
	}
}

// matches reports whether topic matches the group's pattern.
func (g *Group) matches(topic string) bool {
	if g.wild {
		return g.match.Match(topic)
	}
	return routing.Match(g.set.Pattern, topic)
}

// addIfMatches follows topic (its log in) if it matches the group's pattern and is not
// followed yet.
func (g *Group) addIfMatches(topic string, in wal.Instance) {
	g.lookedAt.Add(1)
	if !g.matches(topic) {
		return
	}
	g.mu.Lock()
	if g.mu.topics[topic] == nil {
		g.addTopicLocked(topic, in)
	}
	g.mu.Unlock()
}

// addTopicLocked follows topic, whose log is in, from its stored state, or from the first
// member's start.
func (g *Group) addTopicLocked(topic string, in wal.Instance) {
	n := g.env
	if !g.wild {
		g.mu.cancels = append(g.mu.cancels, n.Wal.Notify(topic, g.wake))
	}
	t := &gtopic{name: topic, in: in}
	st, ok := g.mu.stored[topic]
	delete(g.mu.stored, topic)
	// One look at its bounds serves the start, the tracker and whether it is active: a
	// wildcard group follows many topics. (An advance after it is noted: noteAdvance was
	// registered before the listing.)
	first, head, exists := n.Wal.BoundsAt(in)
	switch {
	case g.resumeLocked(t, st): // a newer state of it was mirrored from another region
		g.advanceLocked(t)
		g.sortReadyLocked()
		_, head, exists = n.Wal.BoundsAt(in)
	case ok:
		t.beginTrack(st, 0, first)
		t.floor, t.next = st.Floor, st.Next
		for _, e := range st.Entries {
			g.restoreLocked(t, e.Offset, e.Deliveries)
		}
		g.advanceLocked(t)
		g.sortReadyLocked()
	case exists && g.lazy(in):
		// No state stored until the group hands something out: the start is the group's,
		// stored with its settings, the same after a restart.
		start := first
		if g.set.Start.Kind != wal.GroupFromFirst {
			start, _ = n.Wal.StartOf(topic, g.set.Start)
		}
		t.floor, t.next = start, start
		t.beginTrack(nil, start, first)
	default:
		next := head
		start := first
		switch g.start.Start {
		case wire.StartLatest:
			start = next
		case wire.StartOffset:
			start = min(max(g.start.StartValue, first), next)
		case wire.StartTime:
			if off, err := n.Wal.OffsetForTime(topic, int64(g.start.StartValue)); err == nil {
				start = max(off, first)
			}
		}
		t.floor, t.next = start, start
		g.markDirtyLocked(t)
		t.beginTrack(nil, start, first)
	}
	g.mu.topics[topic] = t
	g.mu.list = append(g.mu.list, t)
	// A wildcard group's topic with nothing to hand out stays out of active until it
	// advances: joining a group over many idle topics costs its first dispatch nothing
	// per topic.
	if !g.wild || !exists || t.next < head {
		g.activateLocked(t)
	}
}

// storedStart is the start a new group stores with its settings for the first member's
// request req: a topic it has no state of starts there (lazy). A start at an offset is not
// stored (every topic's state is: the offset is clamped to each topic's head when followed).
func storedStart(l *wal.Log, req *wire.Subscribe) (wal.GroupStart, error) {
	switch req.Start {
	case wire.StartEarliest:
		return wal.GroupStart{Kind: wal.GroupFromFirst}, nil
	case wire.StartTime:
		return wal.GroupStart{Kind: wal.GroupFromTime, Time: int64(req.StartValue)}, nil
	case wire.StartLatest:
		mark, err := l.ClockMark(context.Background())
		return wal.GroupStart{Kind: wal.GroupFromMark, Time: mark}, err
	}
	return wal.GroupStart{}, nil
}

// lazy reports whether the group stores no state of topic until it hands out a record of
// it: with a stored start, on a topic of this node's own log. A replicated topic's state
// goes through its raft group, whose entries carry no start: it is stored when followed.
func (g *Group) lazy(in wal.Instance) bool {
	return g.set.Start.Kind != wal.GroupStartUnknown && g.env.Wal.IsLocalAt(in)
}

// restoreLocked puts a stored outstanding record in ready.
func (g *Group) restoreLocked(t *gtopic, off uint64, deliveries uint32) {
	f := &Flight{t: t, in: t.in, off: off, deliveries: deliveries, reason: "the node restarted"}
	switch g.set.Order {
	case wire.OrderTopic:
		f.key = t.name
	case wire.OrderKey:
		f.key = g.readKey(t.name, off)
	}
	g.putOutLocked(t, off, f)
	g.mu.outstanding++
	g.moveLocked(f, fReady, nil)
	g.mu.ready = append(g.mu.ready, f)
}

// readKey reads the key header of a record (OrderKey).
func (g *Group) readKey(topic string, off uint64) string {
	key := ""
	g.env.Wal.ReadFunc(topic, off, 1, 1<<30, func(r *wal.Record) error {
		key = recordKey(r)
		return nil
	})
	return key
}

func recordKey(r *wal.Record) string {
	for _, h := range r.Headers {
		if h.Key == wire.KeyHeader {
			return string(h.Value)
		}
	}
	return ""
}

// Follows reports whether the group follows topic.
func (g *Group) Follows(topic string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.topics[topic] != nil
}

// DropTopic forgets a deleted topic: its records are gone, so nothing of it is handed out
// or stored again, and an ACK of one is ignored. A topic of the same name created later is
// followed as a new one.
func (g *Group) DropTopic(topic string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.mu.stored, topic)
	t := g.mu.topics[topic]
	if t == nil {
		return
	}
	for _, f := range slices.Clone(t.out.all()) {
		g.moveLocked(f, fDone, nil)
		g.dropOutLocked(t, f.off)
		g.mu.outstanding--
	}
	delete(g.mu.topics, topic)
	t.dropped = true
	g.mu.list = slices.DeleteFunc(g.mu.list, func(x *gtopic) bool { return x == t })
	if g.mu.dropped == nil {
		g.mu.dropped = make(map[string]bool)
	}
	g.mu.dropped[topic] = true
	g.broadcastLocked()
}

// Purged moves the group's floor on topic up to cut (the purge's new first offset): the
// records below it are gone, done without a delivery.
func (g *Group) Purged(topic string, cut uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.mu.stored[topic]; st != nil && st.Floor < cut {
		g.mu.stored[topic] = &wal.GroupState{Floor: cut, Next: max(st.Next, cut)}
	}
	t := g.mu.topics[topic]
	if t == nil || t.floor >= cut {
		return
	}
	for t.out.len() > 0 && t.out.all()[0].off < cut { // ascending: those below cut come first
		f := t.out.all()[0]
		g.moveLocked(f, fDone, nil)
		g.dropOutLocked(t, f.off)
		g.mu.outstanding--
	}
	t.floor, t.next = cut, max(t.next, cut)
	g.advanceLocked(t)
	g.markDirtyLocked(t)
	g.activateLocked(t)
	g.broadcastLocked()
}

// markDirtyLocked notes that t's state changed: the next Store writes it.
func (g *Group) markDirtyLocked(t *gtopic) {
	if !t.dirty {
		t.dirty = true
		g.mu.dirty = append(g.mu.dirty, t)
	}
}

// activateLocked puts t among the topics the next dispatch looks at.
func (g *Group) activateLocked(t *gtopic) {
	if !t.active {
		t.active = true
		g.mu.active = append(g.mu.active, t)
	}
}

// noteAdvance is the group's wal.Log.WatchAdvances function (a wildcard group): it notes a
// matching topic that advanced and wakes a member. It runs on the log's completer with the
// log's lock held: it must not block, call the log or take g.mu.
func (g *Group) noteAdvance(topic string, _ bool) {
	if !g.match.Match(topic) {
		return
	}
	g.notes.Lock()
	if g.notes.m == nil {
		g.notes.m = make(map[string]struct{})
	}
	g.notes.m[topic] = struct{}{}
	g.notes.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// takeNotesLocked makes the followed topics noteAdvance noted active. A noted topic the
// group does not follow yet is left to RefreshTopics, which makes it active when it adds it.
func (g *Group) takeNotesLocked() {
	g.notes.Lock()
	notes := g.notes.m
	g.notes.m = nil
	g.notes.Unlock()
	for name := range notes {
		if t := g.mu.topics[name]; t != nil {
			g.activateLocked(t)
		}
	}
}

// putOutLocked records f as outstanding at off of t (a followed topic with nothing
// outstanding holds nothing for it, and is not in withOut).
func (g *Group) putOutLocked(t *gtopic, off uint64, f *Flight) {
	f.off = off
	t.out.put(f)
	if t.withOutAt == 0 {
		g.mu.withOut = append(g.mu.withOut, t)
		t.withOutAt = len(g.mu.withOut)
	}
}

// dropOutLocked forgets the outstanding record at off of t; t leaves withOut with its last
// (the last of withOut takes its place).
func (g *Group) dropOutLocked(t *gtopic, off uint64) {
	t.out.del(off)
	if t.out.len() > 0 || t.withOutAt == 0 {
		return
	}
	i, last := t.withOutAt-1, len(g.mu.withOut)-1
	moved := g.mu.withOut[last]
	g.mu.withOut[i], moved.withOutAt = moved, i+1
	g.mu.withOut[last] = nil
	g.mu.withOut = g.mu.withOut[:last]
	t.withOutAt = 0
}

// withOutLocked is the topics with outstanding records, counted in passed (tests). The
// caller does not add or remove outstanding records while it ranges over them.
func (g *Group) withOutLocked() []*gtopic {
	g.passed.Add(int64(len(g.mu.withOut)))
	return g.mu.withOut
}

// TopicsPassed is how many topics the group's ack-wait expiries and members' leaves looked
// at, in all.
func (g *Group) TopicsPassed() int64 { return g.passed.Load() }

// TopicsVisited is how many topics the group's dispatch looked at for records to hand out,
// in all.
func (g *Group) TopicsVisited() int64 { return g.visited.Load() }

// TopicsLooked is how many topic names the group looked at to follow new topics, in all.
func (g *Group) TopicsLooked() int64 { return g.lookedAt.Load() }
