package groups

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/wal"
)

// The dispatch of a live group (group.go): which member gets which record, when a record is
// handed out again, and when it is done. Every function here runs with g.mu held (or takes
// it) and never blocks.

func (g *Group) holdLocked(key string) *keyHold {
	h := g.mu.holds[key]
	if h == nil {
		h = &keyHold{}
		g.mu.holds[key] = h
	}
	return h
}

func (g *Group) releaseHoldLocked(key string, h *keyHold) {
	if h.n == 0 {
		h.m = nil
		if h.ready == 0 {
			delete(g.mu.holds, key)
		}
	}
}

func (g *Group) sortReadyLocked() {
	slices.SortStableFunc(g.mu.ready, func(a, b *Flight) int {
		if c := cmp.Compare(a.t.name, b.t.name); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
}

// broadcastLocked wakes every member waiting for something to do. A channel no member was
// given (WaitCh) since the last broadcast has nobody to wake: it is kept, so that a run of
// ACKs between two looks of a member makes one channel, not one a record.
func (g *Group) broadcastLocked() {
	if !g.mu.changedOut {
		return
	}
	close(g.mu.changed)
	g.mu.changed = make(chan struct{})
	g.mu.changedOut = false
}

// Take hands member m up to max records: first those reserved for it (its ordered keys),
// then records given back, then new records of the log, while the window has room, each
// with its topic's index on m's stream (bound by this Take, if m had none). It also
// collects records due for the dead-letter topic (dead), which m writes. It never blocks.
// Only m's own goroutine calls Take for m: what it returns is valid until its next call.
func (g *Group) Take(m *Member, max int) (taken []Taken, dead []*Flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	got, dead := g.takeLocked(m, max)
	taken = m.taken[:0]
	for _, f := range got {
		i, bind := g.bindLocked(m, f.t)
		taken = append(taken, Taken{Flight: f, Index: i, Bind: bind})
	}
	clear(got)
	m.got, m.taken = got[:0], taken
	return taken, dead
}

// bindLocked is t's index on m's stream, and whether it was bound now (m had none).
func (g *Group) bindLocked(m *Member, t *gtopic) (uint64, bool) {
	if t.bound.m == m {
		return t.bound.i, false
	}
	if i, ok := m.more[t]; ok {
		return i, false
	}
	i := uint64(len(m.topics))
	m.topics = append(m.topics, t)
	if o := t.bound.m; o != nil { // the slot is another member's: it keeps its index in its map
		if o.more == nil {
			o.more = make(map[*gtopic]uint64)
		}
		o.more[t] = t.bound.i
	}
	t.bound = streamSlot{m: m, i: i}
	return i, true
}

// unbindLocked forgets m's stream indexes (m left).
func (g *Group) unbindLocked(m *Member) {
	for _, t := range m.topics {
		if t.bound.m == m {
			t.bound = streamSlot{}
		}
	}
	m.topics, m.more = nil, nil
}

// topicAtLocked is the topic of index i on m's stream, if bound.
func (g *Group) topicAtLocked(m *Member, i uint64) *gtopic {
	if i >= uint64(len(m.topics)) {
		return nil
	}
	return m.topics[i]
}

// takeLocked is Take's choice of records (into m.got's array) and of dead letters.
func (g *Group) takeLocked(m *Member, max int) (got, dead []*Flight) {
	got = m.got[:0]
	now := time.Now()
	g.expireLocked(now)
	for _, f := range g.mu.dead {
		if f.state == fDead && f.dlqBy == nil {
			f.dlqBy = m // its dead-lettering is m's: handed on if m ends first
			dead = append(dead, f)
		}
	}
	g.mu.dead = nil
	max = min(max, g.memberPending-m.pending)
	for len(m.reserved) > 0 && len(got) < max {
		f := m.reserved[0]
		m.reserved = m.reserved[1:]
		if f.state == fAssigned && f.m == m && f.deadline.IsZero() {
			g.deliverLocked(f, m, now)
			got = append(got, f)
		}
	}
	if len(m.reserved) == 0 {
		m.reserved = nil
	}
	if m.stalled && len(g.mu.members) > 1 {
		return got, dead // its own keys only, until it acknowledges something
	}
	kept := g.mu.ready[:0]
	for _, f := range g.mu.ready {
		switch {
		case f.state != fReady:
		case len(got) < max && g.mayTakeLocked(f, m, now):
			g.moveLocked(f, fAssigned, m)
			g.deliverLocked(f, m, now)
			got = append(got, f)
		default:
			kept = append(kept, f)
		}
	}
	clear(g.mu.ready[len(kept):])
	g.mu.ready = kept
	g.takeNotesLocked()
	for len(got) < max && g.mu.outstanding < g.window {
		t, head := g.nextTopicLocked(m)
		if t == nil {
			break
		}
		room := min(max-len(got), g.window-g.mu.outstanding)
		got = g.dispatchLocked(t, head, m, room, now, got)
	}
	return got, dead
}

// mayTakeLocked reports whether m may take f from ready: with ordering, when no other
// member has f's key; without, when m is not the member f was last delivered to, unless no
// other member took it within an ack-wait (a member that stopped reading keeps room on
// its stream until its flow-control window fills: its records go to the others).
func (g *Group) mayTakeLocked(f *Flight, m *Member, now time.Time) bool {
	if g.set.Order == wire.OrderNone {
		return f.last != m.id || len(g.mu.members) == 1 || now.Sub(f.readySince) > g.set.AckWait
	}
	h := g.mu.holds[f.key]
	return h == nil || h.m == nil || h.m == m
}

// nextTopicLocked is the next topic (round robin), with its head, with records the group has not handed
// out that m may take; it skips records retention deleted meanwhile. Ordered by topic, a
// topic another member holds (or whose records wait in ready) is skipped: its records are
// left in the log for that member to take when it has room, rather than held for it, so a
// member that stopped reading holds its own topics only and none of the window beyond its
// MemberPending.
func (g *Group) nextTopicLocked(m *Member) (*gtopic, uint64) {
	// Each turn moves rr on or takes a topic out of active: at most one look per topic.
	for tries := len(g.mu.active); tries > 0 && len(g.mu.active) > 0; tries-- {
		i := g.mu.rr % len(g.mu.active)
		t := g.mu.active[i]
		g.visited.Add(1)
		first, head, ok := g.env.Wal.BoundsAt(t.in)
		if !ok && !t.dropped {
			// Its log was deleted (or a replica's renewed): it follows the log of its name
			// now, if there is one, as a lookup by name would.
			if in := g.env.Wal.Instance(t.name); in.Valid() {
				t.in = in
				first, head, ok = g.env.Wal.BoundsAt(in)
			}
		}
		gone := t.dropped
		if ok && !gone && t.next < first { // deleted by retention: nothing to deliver, done
			t.next = first
			g.markDirtyLocked(t)
			g.advanceLocked(t)
		}
		if !ok || gone || t.next >= head {
			if g.wild || gone { // out until it advances (noteAdvance)
				t.active = false
				last := len(g.mu.active) - 1
				g.mu.active[i] = g.mu.active[last]
				g.mu.active[last] = nil
				g.mu.active = g.mu.active[:last]
			} else {
				g.mu.rr++
			}
			continue
		}
		g.mu.rr++
		if h := g.mu.holds[t.name]; g.set.Order == wire.OrderTopic && h != nil && (h.ready > 0 || (h.m != nil && h.m != m)) {
			continue
		}
		return t, head
	}
	return nil, 0
}

// dispatchLocked hands out up to room new records of t from its next offset up to head (as
// nextTopicLocked found it): to m, or, for an ordered key another member has (or whose
// records wait in ready), to that member or to ready.
func (g *Group) dispatchLocked(t *gtopic, head uint64, m *Member, room int, now time.Time, got []*Flight) []*Flight {
	count := min(uint64(room), head-t.next)
	var keys []string
	var refs []wal.OriginRef // after a resume from another region's vector (vector.go)
	if g.set.Order == wire.OrderKey || t.skip != nil {
		g.env.Wal.ReadFunc(t.name, t.next, int(count), 1<<30, func(r *wal.Record) error {
			keys = append(keys, recordKey(r))
			refs = append(refs, wal.OriginRef{Region: vector.OriginOf(r, g.env.Region), Offset: r.OriginOffset})
			return nil
		})
		count = uint64(len(keys))
	}
	skipped := false
	defer func() {
		if skipped {
			g.advanceLocked(t)
		}
	}()
	for i := range count {
		if refs != nil { // read here: the store's vector need not read it again
			g.learnLocked(t, originAt{off: t.next, ref: refs[i]})
		}
		if t.skip != nil && t.skipLocked(refs[i]) { // done in another region
			t.next++
			skipped = true
			g.markDirtyLocked(t)
			continue
		}
		f := &Flight{t: t, in: t.in, off: t.next}
		g.putOutLocked(t, t.next, f)
		t.next++
		if refs != nil {
			g.markDirtyLocked(t)
		} else {
			f.fresh = true // marked dirty by Learned, once its member has read it
		}
		g.mu.outstanding++
		switch g.set.Order {
		case wire.OrderTopic:
			f.key = t.name
		case wire.OrderKey:
			f.key = keys[i]
		}
		if h := g.mu.holds[f.key]; g.set.Order != wire.OrderNone && h != nil {
			switch {
			case h.ready > 0:
				g.moveLocked(f, fReady, nil)
				g.mu.ready = append(g.mu.ready, f) // after the key's earlier records
				continue
			case h.m != nil && h.m != m:
				owner := h.m
				g.moveLocked(f, fAssigned, owner)
				owner.reserved = append(owner.reserved, f)
				g.broadcastLocked()
				continue
			}
		}
		g.moveLocked(f, fAssigned, m)
		g.deliverLocked(f, m, now)
		got = append(got, f)
	}
	return got
}

// deliverLocked counts a delivery of f to m (assigned to m already).
func (g *Group) deliverLocked(f *Flight, m *Member, now time.Time) {
	m.pending++
	f.deliveries++
	f.deadline = now.Add(g.set.AckWait)
	f.last = m.id
	if g.mu.nextDue.IsZero() || f.deadline.Before(g.mu.nextDue) {
		g.mu.nextDue = f.deadline
	}
}

// expireLocked handles records whose ack-wait has passed: dead-lettered at max-deliver,
// else given back (to the same member, for an ordered key, so its order holds).
func (g *Group) expireLocked(now time.Time) {
	if g.mu.nextDue.IsZero() || now.Before(g.mu.nextDue) {
		return
	}
	g.mu.nextDue = time.Time{}
	var back []*Flight
	for _, t := range g.withOutLocked() {
		for _, f := range t.out.all() {
			if f.state != fAssigned || f.deadline.IsZero() {
				continue
			}
			if now.Before(f.deadline) {
				if g.mu.nextDue.IsZero() || f.deadline.Before(g.mu.nextDue) {
					g.mu.nextDue = f.deadline
				}
				continue
			}
			f.reason = "its ack-wait of " + g.set.AckWait.String() + " passed"
			f.m.stalled = true
			switch {
			case uint64(f.deliveries) >= g.set.MaxDeliver:
				g.moveLocked(f, fDead, nil)
				g.mu.dead = append(g.mu.dead, f)
			case g.set.Order != wire.OrderNone:
				g.undeliverLocked(f) // again to the same member: its key's order holds
				f.m.reserved = append(f.m.reserved, f)
			default:
				g.moveLocked(f, fReady, nil)
				back = append(back, f)
			}
		}
	}
	if len(back) > 0 {
		g.mu.ready = append(g.mu.ready, back...)
		g.sortReadyLocked()
	}
	g.broadcastLocked()
}

// giveBackLocked hands out again every record assigned to m (reserved, delivered, or being
// dead-lettered by it), because of reason.
func (g *Group) giveBackLocked(m *Member, reason string) {
	var back []*Flight
	for _, t := range g.withOutLocked() {
		for _, f := range t.out.all() {
			switch {
			case f.state == fDead && f.dlqBy == m:
				f.dlqBy = nil
				g.mu.dead = append(g.mu.dead, f)
			case f.state == fAssigned && f.m == m:
				f.reason = reason
				delivered := !f.deadline.IsZero()
				if delivered && uint64(f.deliveries) >= g.set.MaxDeliver {
					g.moveLocked(f, fDead, nil)
					g.mu.dead = append(g.mu.dead, f)
					continue
				}
				g.moveLocked(f, fReady, nil)
				back = append(back, f)
			}
		}
	}
	m.reserved = nil
	if len(back) > 0 {
		g.mu.ready = append(g.mu.ready, back...)
		g.sortReadyLocked()
	}
}

// Ack marks the record at off of topic done, for member m. An ACK of a record never handed
// out is an error; one of a record done already is ignored (a late ACK of a record
// redelivered meanwhile counts: the record was processed).
func (g *Group) Ack(m *Member, topic string, off uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m != nil {
		m.stalled = false
	}
	t, err := g.namedLocked(topic, off)
	if t == nil {
		return err
	}
	return g.ackLocked(t, off)
}

// AckAt is Ack of the record at off of the topic of index i on m's stream (Take): no
// lookup by name.
func (g *Group) AckAt(m *Member, i, off uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	m.stalled = false
	t := g.topicAtLocked(m, i)
	if t == nil {
		return fmt.Errorf("no record at offset %d was delivered", off)
	}
	return g.ackLocked(t, off)
}

// namedLocked is the followed topic of that name; nil with a nil error for one deleted
// while the group was live (an ACK or NAK of its records is ignored), nil with an error
// for one never followed.
func (g *Group) namedLocked(topic string, off uint64) (*gtopic, error) {
	t := g.mu.topics[topic]
	switch {
	case t != nil:
		return t, nil
	case g.mu.dropped[topic]:
		return nil, nil // its topic was deleted
	}
	return nil, fmt.Errorf("no record at offset %d was delivered", off)
}

func (g *Group) ackLocked(t *gtopic, off uint64) error {
	if t.dropped {
		return nil // its topic was deleted
	}
	if off >= t.next {
		return fmt.Errorf("no record at offset %d was delivered", off)
	}
	f := t.out.get(off)
	if f == nil {
		return nil // done
	}
	if f.deliveries == 0 {
		return fmt.Errorf("no record at offset %d was delivered", off)
	}
	g.doneLocked(t, off)
	g.advanceLocked(t)
	g.broadcastLocked()
	return nil
}

// Nak gives the record at off of topic back (member m asked): delivered again at once, or
// dead-lettered at max-deliver.
func (g *Group) Nak(m *Member, topic string, off uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, err := g.namedLocked(topic, off)
	if t == nil {
		return err
	}
	return g.nakLocked(m, t, off)
}

// NakAt is Nak of the record at off of the topic of index i on m's stream (Take).
func (g *Group) NakAt(m *Member, i, off uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.topicAtLocked(m, i)
	if t == nil {
		return fmt.Errorf("no record at offset %d was delivered", off)
	}
	return g.nakLocked(m, t, off)
}

func (g *Group) nakLocked(m *Member, t *gtopic, off uint64) error {
	if t.dropped {
		return nil // its topic was deleted
	}
	if off >= t.next {
		return fmt.Errorf("no record at offset %d was delivered", off)
	}
	f := t.out.get(off)
	if f == nil || f.state != fAssigned || f.m != m || f.deadline.IsZero() {
		return nil // done, or not this member's any more
	}
	f.reason = "the member gave it back (NAK)"
	switch {
	case uint64(f.deliveries) >= g.set.MaxDeliver:
		g.moveLocked(f, fDead, nil)
		g.mu.dead = append(g.mu.dead, f)
	case g.set.Order != wire.OrderNone:
		g.undeliverLocked(f)
		m.reserved = append(m.reserved, f)
	default:
		g.moveLocked(f, fReady, nil)
		g.mu.ready = append(g.mu.ready, f)
		g.sortReadyLocked()
	}
	g.markDirtyLocked(t)
	g.broadcastLocked()
	return nil
}

// doneLocked marks off of t done (acknowledged, dead-lettered or deleted).
func (g *Group) doneLocked(t *gtopic, off uint64) {
	if f := t.out.get(off); f != nil {
		g.moveLocked(f, fDone, nil)
		g.dropOutLocked(t, off)
		g.mu.outstanding--
	}
	g.markDirtyLocked(t)
}

// advanceLocked moves t's floor up to its lowest outstanding offset (next when none).
func (g *Group) advanceLocked(t *gtopic) {
	if t.floor >= t.next {
		return
	}
	if off, ok := t.out.from(t.floor); ok && off < t.next {
		t.floor = off
		return
	}
	t.floor = t.next
}

// finishDead marks dead-lettered records done.
func (g *Group) finishDead(fs []*Flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range fs {
		if f.state == fDead {
			g.doneLocked(f.t, f.off)
			g.advanceLocked(f.t)
		}
	}
	g.broadcastLocked()
}

// undeliverLocked ends f's delivery to its member, if it is delivered.
func (g *Group) undeliverLocked(f *Flight) {
	if f.state == fAssigned && !f.deadline.IsZero() {
		f.m.pending--
		f.deadline = time.Time{}
	}
}

// moveLocked moves f to state to (assigned: to m), keeping its key's hold in step.
func (g *Group) moveLocked(f *Flight, to fstate, m *Member) {
	if g.set.Order != wire.OrderNone {
		h := g.holdLocked(f.key)
		switch f.state {
		case fReady:
			h.ready--
		case fAssigned:
			h.n--
		}
		switch to {
		case fReady:
			h.ready++
		case fAssigned:
			h.n++
			h.m = m
		}
		if h.n == 0 {
			h.m = nil
			if h.ready == 0 {
				delete(g.mu.holds, f.key)
			}
		}
	}
	g.undeliverLocked(f)
	if to == fReady {
		f.readySince = time.Now()
	}
	f.state = to
	f.m = nil
	if to == fAssigned {
		f.m = m
	}
}

// Poke wakes every waiting member: something may be there for them to take.
func (g *Group) Poke() {
	g.mu.Lock()
	g.broadcastLocked()
	g.mu.Unlock()
}
