package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Shared consumer groups (docs/architecture.md, "Consumers"; docs/protocol.md, "Consumer
// groups"). Members of a group split the records of its pattern: each record is handed to
// one member at a time, acknowledged per record, handed out again when its ack-wait passes,
// when the member gives it back (NAK) or when the member's stream ends, and written to the
// group's dead-letter topic once it was delivered MaxDeliver times.
//
// A live group (one with a member on this node) is a group value; its state is owned by
// its mutex, and every member's goroutines take it for short, non-blocking steps: a member
// takes records when it has room on its stream (so QUIC flow control on each member stream
// is the only backpressure: a member that stops reading takes nothing more, and the others
// go on), its ack reader marks records done. Nothing is read from the log for a member that
// did not ask, so no queue grows on the node; what a group holds is bounded by its window
// (GroupConfig.Window): at most Window outstanding records (handed out and not done, or
// given back and waiting to be handed out again) over all its topics. Per topic it keeps
// its floor, the next offset it hands out and the outstanding records between them; every
// other offset between them is done, so however far a member that stopped reading holds
// the floor back, the others go on while the group has fewer than Window outstanding.
//
// State in wal (wal/groups.go): the settings, and per topic the floor, the next offset and
// the outstanding records with their delivery counts, stored in one synced batch after
// each run of ACKs (and at a COMMIT), so that a node restart redelivers nothing
// acknowledged. Delivery counts since the last store can be lost by a crash (a record may
// then be delivered more than MaxDeliver times in all). On a replicated topic the state is
// replicated state (grouprepl.go): each store is a raft entry of the topic's group.
//
// A group is served by its home (grouprelay.go), from that node's log: in a region of
// several nodes, the owner (replicated: the leader) of a literal pattern's topic, else the
// rendezvous winner of its name; members connected to another node are relayed there. A
// pattern is served from the topics its home holds.

// GroupConfig holds the node's consumer group defaults and bounds.
type GroupConfig struct {
	// AckWait is a group's ack-wait when its first member does not set one: how long a
	// delivered record may stay unacknowledged before it is delivered again. Default 30 s.
	AckWait time.Duration
	// MaxDeliver is a group's max-deliver when its first member does not set one: after that
	// many deliveries a record goes to the dead-letter topic. Default 5.
	MaxDeliver int
	// Window caps a group's outstanding records over all its topics: those handed out and
	// not yet acknowledged or dead-lettered, and those given back and waiting to be handed
	// out again. It is the bound of a group's memory (a few hundred bytes per record) and of
	// each stored state; the span between a topic's floor and the next record handed out is
	// not bounded. Default 1024.
	Window int
	// MemberBatch is how many records a member takes at a time when it has room. Default 64.
	MemberBatch int
	// MemberPending caps the records one member holds delivered and not acknowledged: a
	// member that stops reading keeps room on its stream until its flow-control window
	// fills, and takes no more than this meanwhile. Default 256.
	MemberPending int
}

func (c *GroupConfig) withDefaults() {
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	setDefault(&c.MaxDeliver, 5)
	setDefault(&c.Window, 1024)
	setDefault(&c.MemberBatch, 64)
	setDefault(&c.MemberPending, 256)
}

// validate reports the problems of c, prefixed "Groups.".
func (c GroupConfig) validate() []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxDeliver", c.MaxDeliver}, {"Window", c.Window}, {"MemberBatch", c.MemberBatch}, {"MemberPending", c.MemberPending}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("node: config: Groups.%s must not be negative, got %d", f.name, f.v))
		}
	}
	if c.AckWait < 0 {
		errs = append(errs, fmt.Errorf("node: config: Groups.AckWait must not be negative, got %v", c.AckWait))
	}
	return errs
}

// group is a live consumer group on this node.
type group struct {
	n      *Node
	name   string // with the tenant's namespace: the key of its state
	shown  string // as clients name it
	set    wal.GroupSettings
	window int
	// memberPending caps the records one member holds delivered and unacknowledged
	// (GroupConfig.MemberPending), as JetStream's MaxAckPending does per consumer.
	memberPending int
	start         wire.Subscribe // the first member's start: for topics without state

	ended     chan struct{} // closed when its last member left: it is live no more
	wake      chan struct{} // its topics advanced (wal.Notify), capacity 1
	newTopics chan struct{} // a topic was created (wal.NotifyNewTopics), capacity 1
	storeMu   sync.Mutex    // serialises stores: a later snapshot is never overwritten by an earlier one
	looked    atomic.Int64  // topic names refreshTopics looked at, in all (tests)

	mu struct {
		sync.Mutex
		topics      map[string]*gtopic
		list        []*gtopic // for round-robin dispatch
		rr          int
		outstanding int       // flights in all topics
		ready       []*flight // given back, sorted by (topic, offset)
		dead        []*flight // reached max-deliver, for the next member to dead-letter
		holds       map[string]*keyHold
		members     map[*member]bool
		changed     chan struct{} // closed and replaced when members may find something to do
		nextDue     time.Time     // the earliest ack-wait deadline (zero: none)
		stored      map[string]*wal.GroupState
		mirrored    map[string][]*wal.GroupState // states of its topics mirrored from other regions (groupvector.go)
		cancels     []func()
		created     int // the log's creation mark (wal.Log.CreatedSince) refreshTopics has seen to
		// dropped names topics deleted while the group was live (manage_groups.go): their
		// records are gone, so an ACK of one is no error.
		dropped map[string]bool
	}
}

// gtopic is a group's position in one topic: every offset below floor is done; of [floor,
// next), the flights (out) are outstanding and every other offset is done. floor is out's
// lowest offset, or next when out is empty.
type gtopic struct {
	name        string
	floor, next uint64
	out         map[uint64]*flight
	dirty       bool
	skip        *groupSkip  // after a resume from another region's vector (groupvector.go)
	track       *groupTrack // the store's vector: set when added, then owned by g.storeMu
}

// flight is an outstanding record: handed out, or given back, and not done.
type flight struct {
	t          *gtopic
	off        uint64
	deliveries uint32
	state      fstate
	m          *member   // fAssigned: the member it is reserved for (deadline zero) or delivered to
	deadline   time.Time // fAssigned and delivered: when its ack-wait passes
	dlqBy      *member   // fDead: the member writing it to the dead-letter topic
	key        string    // with ordering: the topic or the key header's value
	reason     string    // why it was last given back
	readySince time.Time // when it was last put in ready
	last       string    // the member it was last delivered to
}

// fstate is where a flight is. Lists (ready, reserved, dead) may keep a flight that has
// moved on: its state says whether the entry is current.
type fstate uint8

const (
	fNew      fstate = iota
	fReady           // in ready: any member may take it (with ordering: its key's member)
	fAssigned        // reserved for or delivered to m
	fDead            // in dead, or being dead-lettered by dlqBy
	fDone            // acknowledged, dead-lettered or deleted
)

// keyHold is an ordered key's member: records of the key go to m only while it has some of
// them (n), and to nobody while some of them wait in ready (ready), so a key's records are
// handed out in offset order to one member at a time.
type keyHold struct {
	m     *member
	n     int
	ready int
}

// joinGroup finds or starts the live group name (namespaced; shown to clients as shown)
// with the member's settings, and adds m to it. A member whose settings differ from the
// group's is refused with CodeConflict naming the difference.
func (n *Node) joinGroup(name, shown string, req *wire.Subscribe, want wal.GroupSettings, m *member) (*group, *wire.Error) {
	c := &n.cons
	c.mu.Lock()
	defer c.mu.Unlock()
	if op, ok := c.mu.fenced[name]; ok {
		return nil, wire.Errorf(wire.CodeInUse, "group %q is being %s by a management request: subscribe again once it is done", shown, op)
	}
	g := c.mu.groups[name]
	if g == nil {
		var e *wire.Error
		if g, e = n.loadGroup(name, shown, req, want); e != nil {
			return nil, e
		}
		if c.mu.groups == nil {
			c.mu.groups = make(map[string]*group)
		}
		c.mu.groups[name] = g
	} else if e := g.conflict(want); e != nil {
		return nil, e
	}
	g.mu.Lock()
	g.mu.members[m] = true
	g.mu.Unlock()
	return g, nil
}

// loadGroup starts a live group from its stored state, or creates it with want (zero values
// replaced by the node's defaults) and stores its settings. Called with cons.mu held.
func (n *Node) loadGroup(name, shown string, req *wire.Subscribe, want wal.GroupSettings) (*group, *wire.Error) {
	set, states, ok, err := n.wal.Group(name)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "load group %q: %v", shown, err)
	}
	g := &group{n: n, name: name, shown: shown, window: n.cfg.Groups.Window, memberPending: n.cfg.Groups.MemberPending, start: *req,
		ended: make(chan struct{}), wake: make(chan struct{}, 1), newTopics: make(chan struct{}, 1)}
	if ok {
		g.set = set
		if e := g.conflict(want); e != nil {
			return nil, e
		}
	} else {
		g.set = want
		if g.set.AckWait == 0 {
			g.set.AckWait = n.cfg.Groups.AckWait
		}
		if g.set.MaxDeliver == 0 {
			g.set.MaxDeliver = uint64(n.cfg.Groups.MaxDeliver)
		}
		if err := n.wal.SetGroup(context.Background(), name, &g.set, nil); err != nil {
			return nil, wire.Errorf(wire.CodeInternal, "store group %q: %v", shown, err)
		}
	}
	g.mu.topics = make(map[string]*gtopic)
	g.mu.holds = make(map[string]*keyHold)
	g.mu.members = make(map[*member]bool)
	g.mu.changed = make(chan struct{})
	g.mu.stored = states
	g.mu.mirrored = n.mirroredStates(name)
	g.mu.cancels = append(g.mu.cancels, n.wal.NotifyNewTopics(g.newTopics))
	// The mark before the listing: a topic created meanwhile is in both, and added once.
	_, g.mu.created = n.wal.CreatedSince(-1)
	for _, ti := range n.wal.Topics() {
		g.addIfMatches(ti.Name)
	}
	return g, nil
}

// conflict names the first setting of want (non-zero) that differs from the group's.
func (g *group) conflict(want wal.GroupSettings) *wire.Error {
	diff := func(what, have, asked string) *wire.Error {
		return wire.Errorf(wire.CodeConflict, "group %q has %s %s, this member asks for %s: every member of a group has its settings (set by its first member)", g.shown, what, have, asked)
	}
	switch {
	case want.Pattern != g.set.Pattern:
		return diff("pattern", strconv.Quote(g.set.Pattern), strconv.Quote(want.Pattern))
	case want.AckWait != 0 && want.AckWait != g.set.AckWait:
		return diff("ack-wait", g.set.AckWait.String(), want.AckWait.String())
	case want.MaxDeliver != 0 && want.MaxDeliver != g.set.MaxDeliver:
		return diff("max-deliver", strconv.FormatUint(g.set.MaxDeliver, 10), strconv.FormatUint(want.MaxDeliver, 10))
	case want.DeadLetter != "" && want.DeadLetter != g.set.DeadLetter:
		return diff("dead-letter topic", strconv.Quote(g.set.DeadLetter), strconv.Quote(want.DeadLetter))
	case want.Order != g.set.Order:
		return diff("order", orderName(g.set.Order), orderName(want.Order))
	}
	return nil
}

func orderName(o byte) string {
	switch o {
	case wire.OrderTopic:
		return "by topic"
	case wire.OrderKey:
		return "by key"
	}
	return "none"
}

// leaveGroup removes m from g: its records are handed out again (or dead-lettered when
// they reached max-deliver). The last member's leave ends the live group.
func (n *Node) leaveGroup(g *group, m *member) {
	c := &n.cons
	c.mu.Lock()
	defer c.mu.Unlock()
	g.mu.Lock()
	delete(g.mu.members, m)
	g.giveBackLocked(m, "the member's stream ended")
	last := len(g.mu.members) == 0
	cancels := g.mu.cancels
	if last {
		g.mu.cancels = nil
	}
	g.broadcastLocked()
	g.mu.Unlock()
	if last {
		for _, cancel := range cancels {
			cancel()
		}
		delete(c.mu.groups, g.name)
		close(g.ended)
	}
}

// refreshTopics adds the topics created since it last looked that match the group's pattern
// and that it does not follow yet. It looks only at those (wal.Log.CreatedSince), so a group
// over a wildcard does not list every topic of the node at each new one.
func (g *group) refreshTopics() {
	g.mu.Lock()
	mark := g.mu.created
	g.mu.Unlock()
	names, next := g.n.wal.CreatedSince(mark)
	g.mu.Lock()
	g.mu.created = max(g.mu.created, next) // members refresh concurrently: never back
	g.mu.Unlock()
	for _, name := range names {
		if _, _, ok := g.n.wal.Bounds(name); ok { // else deleted since
			g.addIfMatches(name)
		}
	}
}

// addIfMatches follows topic if it matches the group's pattern and is not followed yet.
func (g *group) addIfMatches(topic string) {
	g.looked.Add(1)
	if !routing.Match(g.set.Pattern, topic) {
		return
	}
	g.mu.Lock()
	if g.mu.topics[topic] == nil {
		g.addTopicLocked(topic)
	}
	g.mu.Unlock()
}

// addTopicLocked follows topic from its stored state, or from the first member's start.
func (g *group) addTopicLocked(topic string) {
	n := g.n
	g.mu.cancels = append(g.mu.cancels, n.wal.Notify(topic, g.wake))
	t := &gtopic{name: topic, out: make(map[uint64]*flight)}
	st, ok := g.mu.stored[topic]
	delete(g.mu.stored, topic)
	switch {
	case g.resumeLocked(t, st): // a newer state of it was mirrored from another region
		g.advanceLocked(t)
	case ok:
		t.beginTrack(n.wal, st, 0)
		t.floor, t.next = st.Floor, st.Next
		for _, e := range st.Entries {
			g.restoreLocked(t, e.Offset, e.Deliveries)
		}
		g.advanceLocked(t)
	default:
		first, next, _ := n.wal.Bounds(topic)
		start := first
		switch g.start.Start {
		case wire.StartLatest:
			start = next
		case wire.StartOffset:
			start = min(max(g.start.StartValue, first), next)
		case wire.StartTime:
			if off, err := n.wal.OffsetForTime(topic, int64(g.start.StartValue)); err == nil {
				start = max(off, first)
			}
		}
		t.floor, t.next, t.dirty = start, start, true
		t.beginTrack(n.wal, nil, start)
	}
	g.mu.topics[topic] = t
	g.mu.list = append(g.mu.list, t)
	g.sortReadyLocked()
}

// restoreLocked puts a stored outstanding record in ready.
func (g *group) restoreLocked(t *gtopic, off uint64, deliveries uint32) {
	f := &flight{t: t, off: off, deliveries: deliveries, reason: "the node restarted"}
	switch g.set.Order {
	case wire.OrderTopic:
		f.key = t.name
	case wire.OrderKey:
		f.key = g.readKey(t.name, off)
	}
	t.out[off] = f
	g.mu.outstanding++
	g.moveLocked(f, fReady, nil)
	g.mu.ready = append(g.mu.ready, f)
}

// readKey reads the key header of a record (OrderKey).
func (g *group) readKey(topic string, off uint64) string {
	key := ""
	g.n.wal.ReadFunc(topic, off, 1, 1<<30, func(r *wal.Record) error {
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

// store writes the state of the topics that changed since the last store, in one synced
// batch, and returns once it is durable.
func (g *group) store(ctx context.Context) error {
	g.storeMu.Lock()
	defer g.storeMu.Unlock()
	g.mu.Lock()
	states := make(map[string]*wal.GroupState)
	for _, t := range g.mu.list {
		if !t.dirty {
			continue
		}
		t.dirty = false
		st := &wal.GroupState{Floor: t.floor, Next: t.next, Entries: make([]wal.GroupEntry, 0, len(t.out))}
		for off, f := range t.out {
			st.Entries = append(st.Entries, wal.GroupEntry{Offset: off, Deliveries: f.deliveries})
		}
		slices.SortFunc(st.Entries, func(a, b wal.GroupEntry) int { return cmp.Compare(a.Offset, b.Offset) })
		st.Vector = t.skipVectorLocked() // with the entries it snapshots (groupvector.go)
		states[t.name] = st
	}
	g.mu.Unlock()
	if len(states) == 0 {
		return nil
	}
	g.addVectors(states)
	// grouprepl.go: the settings go with a replicated topic's entry, so every replica has them.
	set := g.set
	if err := g.n.storeGroup(ctx, g.name, &set, states); err != nil {
		g.mu.Lock()
		for name := range states {
			g.mu.topics[name].dirty = true
		}
		g.mu.Unlock()
		return err
	}
	return nil
}

// waitCh returns what a member waits on when it found nothing to do: the group's change
// channel and the time of the next ack-wait deadline (zero: none).
func (g *group) waitCh() (<-chan struct{}, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.changed, g.mu.nextDue
}

// deadLetter appends records that reached max-deliver to the group's dead-letter topic,
// with headers saying why and from where, then marks them done. Without a dead-letter
// topic they are dropped (logged). The append is synced; the group's state is stored after
// it, so a crash in between can write a record to the dead-letter topic twice, never lose it.
func (g *group) deadLetter(ctx context.Context, fs []*flight, shown func(string) string) error {
	n := g.n
	if g.set.DeadLetter == "" {
		for _, f := range fs {
			n.log.Warn("group dropped a record after max-deliver (no dead-letter topic)", "group", g.shown, "topic", f.t.name, "offset", f.off, "deliveries", f.deliveries)
		}
		g.finishDead(fs)
		return nil
	}
	recs := make([]wal.Record, 0, len(fs))
	for _, f := range fs {
		_, err := n.wal.ReadFunc(f.t.name, f.off, 1, 1<<30, func(r *wal.Record) error {
			hs := make([]wire.Header, 0, len(r.Headers)+6)
			hs = append(hs,
				wire.Header{Key: "quicmq-dead-letter-topic", Value: []byte(shown(f.t.name))},
				wire.Header{Key: "quicmq-dead-letter-offset", Value: strconv.AppendUint(nil, f.off, 10)},
				wire.Header{Key: "quicmq-dead-letter-group", Value: []byte(g.shown)},
				wire.Header{Key: "quicmq-dead-letter-deliveries", Value: strconv.AppendUint(nil, uint64(f.deliveries), 10)},
				wire.Header{Key: "quicmq-dead-letter-member", Value: []byte(f.last)},
				wire.Header{Key: "quicmq-dead-letter-reason", Value: []byte(f.reason)})
			for _, h := range r.Headers {
				hs = append(hs, wire.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
			}
			recs = append(recs, wal.Record{Headers: hs, Payload: append([]byte(nil), r.Payload...)})
			return nil
		})
		if err != nil && !errors.Is(err, wal.ErrOffsetOutOfRange) {
			return fmt.Errorf("read %q at offset %d: %w", f.t.name, f.off, err)
		}
	}
	if len(recs) > 0 {
		if err := n.appendDeadLetter(context.WithoutCancel(ctx), g.set.DeadLetter, recs); err != nil { // grouprepl.go
			return fmt.Errorf("append to dead-letter topic %q: %w", shown(g.set.DeadLetter), err)
		}
	}
	g.finishDead(fs)
	return g.store(context.WithoutCancel(ctx))
}
