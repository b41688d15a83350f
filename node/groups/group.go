package groups

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Member is a member as its group sees it: made by NewStream (a Stream's), its fields set
// once there (id, end) or under the group's mutex, which only the group's methods take.
type Member struct {
	id string // for the dead-letter headers: the client's address and the stream
	// end ends the member's stream with e (a management request's endGroup).
	end func(e *wire.Error)

	reserved []*Flight // records of its ordered keys, to deliver next
	pending  int       // records delivered to it and not done
	// stalled: a record delivered to it passed its ack-wait and it acknowledged nothing
	// since; it takes no new records meanwhile (the others do), so a member that stopped
	// reading does not take record after record to max-deliver.
	stalled bool
	// The member's stream indexes (each bound once on its stream, bindLocked): topics[i]
	// is the topic of index i. A topic's index for this member is in the topic's slot
	// (gtopic.bound) while the slot is this member's, else in more: a group of one member,
	// the usual case, binds each of many topics with no map.
	topics []*gtopic
	more   map[*gtopic]uint64
	// taken is what the last Take returned (reused by the next): only the member's own
	// goroutine calls Take for it.
	taken []Taken
	got   []*Flight
}

// Taken is a record Take handed to a member, with its topic's index on the member's stream.
type Taken struct {
	*Flight
	Index uint64
	// Bind: this Take bound Index to the topic; the member sends the binding (a TOPIC frame)
	// before the record.
	Bind bool
}

// Group is a live consumer group on this node.
type Group struct {
	env    *Env
	name   string            // with the tenant's namespace: the key of its state
	shown  string            // as clients name it
	set    wal.GroupSettings // set by New, never changed after
	window int
	// memberPending caps the records one member holds delivered and unacknowledged
	// (Config.MemberPending), as JetStream's MaxAckPending does per consumer.
	memberPending int
	start         wire.Subscribe // the first member's start: for topics without state when Set.Start is not stored

	ended     chan struct{} // closed when its last member left: it is live no more
	wake      chan struct{} // its topics advanced (wal.Notify), capacity 1
	newTopics chan struct{} // a topic was created (wal.NotifyNewTopics), capacity 1
	storeMu   sync.Mutex    // serialises stores: a later snapshot is never overwritten by an earlier one
	vecs      vecCache      // vectors of one origin, shared by its topics' trackers (vector.go; g.storeMu)
	lookedAt  atomic.Int64  // topic names refreshTopics looked at, in all (tests)
	visited   atomic.Int64  // topics a dispatch looked at for records, in all (tests)
	passed    atomic.Int64  // topics an ack-wait expiry or a member's leave looked at, in all (tests)
	// wild: the pattern has a wildcard. Such a group learns which of its topics advanced
	// from one registration for every topic of the log (wal.Log.WatchAdvances: noteAdvance,
	// into notes), not from a watcher per topic, and looks only at its active topics.
	wild  bool
	match routing.Matcher
	// notes is what noteAdvance noted since Take last took it: the names of topics that
	// advanced. noteAdvance runs on the log's completer with the log's lock held, so it
	// takes only this mutex, never g.mu (whose holders call the log).
	notes struct {
		sync.Mutex
		m map[string]struct{}
	}

	mu struct {
		sync.Mutex
		topics map[string]*gtopic
		list   []*gtopic // every followed topic
		// active is the followed topics that may have records to hand out, for round-robin
		// dispatch (rr): a topic of a wildcard group leaves it when it has none and comes
		// back when it advances (notes), so that a dispatch or a wake costs the topics with
		// records, not every topic that matches. A literal group's topic never leaves it.
		active []*gtopic
		rr     int
		// withOut is the followed topics with outstanding records (gtopic.out not empty), so
		// that an ack-wait expiry or a member's leave costs what is outstanding (at most
		// the window), not every topic that matches. A topic knows its place in it
		// (gtopic.withOutAt): joining and leaving it cost no hashing.
		withOut []*gtopic
		// dirty is the topics whose state changed since the last store (gtopic.dirty), so
		// a store costs the topics that changed, not every topic followed.
		dirty       []*gtopic
		outstanding int       // flights in all topics
		ready       []*Flight // given back, sorted by (topic, offset)
		dead        []*Flight // reached max-deliver, for the next member to dead-letter
		holds       map[string]*keyHold
		members     map[*Member]bool
		changed     chan struct{} // closed and replaced when members may find something to do
		changedOut  bool          // changed was given to a member (WaitCh) since it was made
		nextDue     time.Time     // the earliest ack-wait deadline (zero: none)
		learnArena  []originAt    // the slots of topics' first learned origins (learnLocked)
		stored      map[string]*wal.GroupState
		mirrored    map[string][]*wal.GroupState // states of its topics mirrored from other regions (vector.go)
		cancels     []func()
		created     int // the log's creation mark (wal.Log.CreatedSince) refreshTopics has seen to
		// dropped names topics deleted while the group was live (node/manage: Here.Removed): their
		// records are gone, so an ACK of one is no error.
		dropped map[string]bool
	}
}

// gtopic is a group's position in one topic: every offset below floor is done; of [floor,
// next), the flights (out) are outstanding and every other offset is done. floor is out's
// lowest offset, or next when out is empty.
type gtopic struct {
	name string
	// in is its log as the group found it (wal.Instance): the group looks at its bounds,
	// and its members read it, with no lookup by name. Replaced by the log of its name when
	// that one is deleted (nextTopicLocked).
	in          wal.Instance
	floor, next uint64
	out         outSet     // ascending by offset (outset.go)
	dirty       bool       // in g.mu.dirty
	active      bool       // in g.mu.active
	dropped     bool       // deleted while followed (DropTopic): no longer in g.mu.topics
	withOutAt   int        // its place in g.mu.withOut plus one; 0: not in it
	bound       streamSlot // a member's stream index of it (Member.topics)
	skip        *groupSkip // after a resume from another region's vector (vector.go)
	track       groupTrack // the store's vector: set when added, then owned by g.storeMu (in the gtopic: no allocation per topic followed)
	// learned is the origins of its records the members read as they handed them out (or
	// dispatch read), since the last store took them: the store's vector needs no second
	// read of those (vector.go).
	learned []originAt
}

// streamSlot is one member's stream index of a topic (bindLocked).
type streamSlot struct {
	m *Member
	i uint64
}

// Flight is an outstanding record: handed out, or given back, and not done.
type Flight struct {
	t          *gtopic
	in         wal.Instance // its topic's log when it was handed out or restored (gtopic.in)
	off        uint64
	deliveries uint32
	state      fstate
	m          *Member   // fAssigned: the member it is reserved for (deadline zero) or delivered to
	deadline   time.Time // fAssigned and delivered: when its ack-wait passes
	dlqBy      *Member   // fDead: the member writing it to the dead-letter topic
	key        string    // with ordering: the topic or the key header's value
	reason     string    // why it was last given back
	readySince time.Time // when it was last put in ready
	last       string    // the member it was last delivered to
	// fresh: dispatched without its topic marked dirty; the member's Learned marks it once
	// it has read the record, so that a store rarely finds a record handed out whose origin
	// is not known yet (it would read it again).
	fresh bool
}

// Topic is the topic of f's record; offset its offset.
func (f *Flight) Topic() string  { return f.t.name }
func (f *Flight) Offset() uint64 { return f.off }

// Instance is the log of f's topic that f was handed out from: a reader of f's record
// reads it with no lookup by name (and, should it be deleted since, looks up the log of the
// name now, as wal.Log.Instance).
func (f *Flight) Instance() wal.Instance { return f.in }

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
	m     *Member
	n     int
	ready int
}

// New starts a live group from its stored state (set and states, when stored), or
// creates it with want (zero values replaced by the node's defaults) and stores its settings.
func New(env *Env, name, shown string, req *wire.Subscribe, want wal.GroupSettings) (*Group, *wire.Error) {
	set, states, ok, err := env.Wal.Group(name)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "load group %q: %v", shown, err)
	}
	g := &Group{env: env, name: name, shown: shown, window: env.Cfg.Window, memberPending: env.Cfg.MemberPending, start: *req,
		ended: make(chan struct{}), wake: make(chan struct{}, 1), newTopics: make(chan struct{}, 1)}
	if ok {
		g.set = set
		if e := g.Conflict(want); e != nil {
			return nil, e
		}
		if set.Start.Kind == wal.GroupFromMark {
			env.Wal.RaiseClock(set.Start.Time) // no record appended from now on is before it
		}
	} else {
		g.set = want
		if g.set.AckWait == 0 {
			g.set.AckWait = env.Cfg.AckWait
		}
		if g.set.MaxDeliver == 0 {
			g.set.MaxDeliver = uint64(env.Cfg.MaxDeliver)
		}
		if g.set.Start, err = storedStart(env.Wal, req); err != nil {
			return nil, wire.Errorf(wire.CodeInternal, "start group %q: %v", shown, err)
		}
		if err := env.Wal.SetGroup(context.Background(), name, &g.set, nil); err != nil {
			return nil, wire.Errorf(wire.CodeInternal, "store group %q: %v", shown, err)
		}
	}
	g.mu.holds = make(map[string]*keyHold)
	g.mu.members = make(map[*Member]bool)
	g.mu.changed = make(chan struct{})
	g.mu.stored = states
	g.mu.mirrored = env.Mirrored(name)
	g.mu.cancels = append(g.mu.cancels, env.Wal.NotifyNewTopics(g.newTopics))
	if m, err := routing.NewMatcher(g.set.Pattern); err == nil && strings.ContainsAny(g.set.Pattern, "*>") {
		// Before the listing: an advance of a listed topic is noted or in the listing.
		g.wild, g.match = true, m
		g.mu.cancels = append(g.mu.cancels, env.Wal.WatchAdvances(g.noteAdvance))
	}
	// The mark before the listing: a topic created meanwhile is in both, and added once.
	_, g.mu.created = env.Wal.CreatedSince(-1)
	// The topics as the log's Instances (the group keeps each: no later look at one is a
	// lookup by name), under one hold of g.mu (no member has g yet). Those that match,
	// sorted by name: the first pass of dispatch goes through the topics in this order,
	// and the group's states are keyed by topic name, so that each store writes keys next
	// to those of the one before (in Pebble's memtable, an insert next to the last is
	// cheap, one anywhere is a search from the top of its skiplist: twice the store's cost
	// over 100,000 topics in map order).
	all := env.Wal.TopicInstances()
	g.lookedAt.Add(int64(len(all)))
	type named struct {
		name string
		in   wal.Instance
	}
	matching := make([]named, 0, len(all))
	for _, in := range all {
		if name := in.Name(); g.matches(name) {
			matching = append(matching, named{name, in})
		}
	}
	slices.SortFunc(matching, func(a, b named) int { return strings.Compare(a.name, b.name) })
	g.mu.Lock()
	g.mu.topics = make(map[string]*gtopic, len(matching))
	g.mu.list = make([]*gtopic, 0, len(matching))
	for _, t := range matching {
		g.addTopicLocked(t.name, t.in)
	}
	g.mu.Unlock()
	return g, nil
}

// Name is the group's name with its tenant's namespace (the key of its state); Shown as
// clients name it; Settings its settings (fixed when it went live).
func (g *Group) Name() string                { return g.name }
func (g *Group) Shown() string               { return g.shown }
func (g *Group) Settings() wal.GroupSettings { return g.set }

// Ended is closed when the group's last member left: it is live no more.
func (g *Group) Ended() <-chan struct{} { return g.ended }

// Conflict names the first setting of want (non-zero) that differs from the group's.
func (g *Group) Conflict(want wal.GroupSettings) *wire.Error {
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
		return diff("order", OrderName(g.set.Order), OrderName(want.Order))
	}
	return nil
}

func OrderName(o byte) string {
	switch o {
	case wire.OrderTopic:
		return "by topic"
	case wire.OrderKey:
		return "by key"
	}
	return "none"
}

// Join adds m to the group.
func (g *Group) Join(m *Member) {
	g.mu.Lock()
	g.mu.members[m] = true
	g.mu.Unlock()
}

// Leave removes m from g: its records are handed out again (or dead-lettered when they
// reached max-deliver). The last member's leave ends the live group, and leave says so.
func (g *Group) Leave(m *Member) (last bool) {
	g.mu.Lock()
	delete(g.mu.members, m)
	g.unbindLocked(m)
	g.giveBackLocked(m, "the member's stream ended")
	last = len(g.mu.members) == 0
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
		close(g.ended)
	}
	return last
}

// WaitCh returns what a member waits on when it found nothing to do: the group's change
// channel and the time of the next ack-wait deadline (zero: none).
func (g *Group) WaitCh() (<-chan struct{}, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.changedOut = true
	return g.mu.changed, g.mu.nextDue
}

// EndMembers ends every member's stream with e.
func (g *Group) EndMembers(e *wire.Error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for m := range g.mu.members {
		m.end(e)
	}
}

// MemberCount is how many members the group has on this node.
func (g *Group) MemberCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.mu.members)
}
