package groups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Config holds the node's consumer group defaults and bounds.
type Config struct {
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

func (c *Config) WithDefaults() {
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&c.MaxDeliver, 5}, {&c.Window, 1024}, {&c.MemberBatch, 64}, {&c.MemberPending, 256}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
}

// Validate reports the problems of c, prefixed "Groups.".
func (c Config) Validate() []error {
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

// Env is what the groups need of their node: its log, its region and the node's group
// settings, and where a group's state and dead-letter records are written (its own log, or
// the topic's raft group: grouprepl.go). One per node, shared by its live groups.
type Env struct {
	Wal    *wal.Log
	Log    *slog.Logger
	Region string
	Cfg    Config
	// store writes a group's settings and the states of its topics that changed, durably.
	Store func(ctx context.Context, name string, set *wal.GroupSettings, states map[string]*wal.GroupState) error
	// appendDeadLetter appends records to a dead-letter topic, durably.
	AppendDeadLetter func(ctx context.Context, topic string, recs []wal.Record) error
	// mirrored loads the states of a group mirrored from other regions, by topic.
	Mirrored func(name string) map[string][]*wal.GroupState
}

// Member is a member as its group sees it. Its fields are under the group's mutex.
type Member struct {
	ID string // for the dead-letter headers: the client's address and the stream
	// end ends the member's stream with e (a management request's endGroup).
	End func(e *wire.Error)

	reserved []*Flight // records of its ordered keys, to deliver next
	pending  int       // records delivered to it and not done
	// stalled: a record delivered to it passed its ack-wait and it acknowledged nothing
	// since; it takes no new records meanwhile (the others do), so a member that stopped
	// reading does not take record after record to max-deliver.
	stalled bool
}

// Group is a live consumer group on this node.
type Group struct {
	env    *Env
	Name   string // with the tenant's namespace: the key of its state
	Shown  string // as clients name it
	Set    wal.GroupSettings
	window int
	// memberPending caps the records one member holds delivered and unacknowledged
	// (Config.MemberPending), as JetStream's MaxAckPending does per consumer.
	memberPending int
	start         wire.Subscribe // the first member's start: for topics without state when Set.Start is not stored

	Ended     chan struct{} // closed when its last member left: it is live no more
	Wake      chan struct{} // its topics advanced (wal.Notify), capacity 1
	NewTopics chan struct{} // a topic was created (wal.NotifyNewTopics), capacity 1
	storeMu   sync.Mutex    // serialises stores: a later snapshot is never overwritten by an earlier one
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
		// the window), not every topic that matches.
		withOut map[*gtopic]struct{}
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
	out         outSet     // ascending by offset (outset.go)
	dirty       bool       // in g.mu.dirty
	active      bool       // in g.mu.active
	skip        *groupSkip // after a resume from another region's vector (vector.go)
	track       groupTrack // the store's vector: set when added, then owned by g.storeMu (in the gtopic: no allocation per topic followed)
	// learned is the origins of its records the members read as they handed them out (or
	// dispatch read), since the last store took them: the store's vector needs no second
	// read of those (vector.go).
	learned []originAt
}

// Flight is an outstanding record: handed out, or given back, and not done.
type Flight struct {
	t          *gtopic
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
	g := &Group{env: env, Name: name, Shown: shown, window: env.Cfg.Window, memberPending: env.Cfg.MemberPending, start: *req,
		Ended: make(chan struct{}), Wake: make(chan struct{}, 1), NewTopics: make(chan struct{}, 1)}
	if ok {
		g.Set = set
		if e := g.Conflict(want); e != nil {
			return nil, e
		}
		if set.Start.Kind == wal.GroupFromMark {
			env.Wal.RaiseClock(set.Start.Time) // no record appended from now on is before it
		}
	} else {
		g.Set = want
		if g.Set.AckWait == 0 {
			g.Set.AckWait = env.Cfg.AckWait
		}
		if g.Set.MaxDeliver == 0 {
			g.Set.MaxDeliver = uint64(env.Cfg.MaxDeliver)
		}
		if g.Set.Start, err = storedStart(env.Wal, req); err != nil {
			return nil, wire.Errorf(wire.CodeInternal, "start group %q: %v", shown, err)
		}
		if err := env.Wal.SetGroup(context.Background(), name, &g.Set, nil); err != nil {
			return nil, wire.Errorf(wire.CodeInternal, "store group %q: %v", shown, err)
		}
	}
	g.mu.topics = make(map[string]*gtopic)
	g.mu.withOut = make(map[*gtopic]struct{})
	g.mu.holds = make(map[string]*keyHold)
	g.mu.members = make(map[*Member]bool)
	g.mu.changed = make(chan struct{})
	g.mu.stored = states
	g.mu.mirrored = env.Mirrored(name)
	g.mu.cancels = append(g.mu.cancels, env.Wal.NotifyNewTopics(g.NewTopics))
	if m, err := routing.NewMatcher(g.Set.Pattern); err == nil && strings.ContainsAny(g.Set.Pattern, "*>") {
		// Before the listing: an advance of a listed topic is noted or in the listing.
		g.wild, g.match = true, m
		g.mu.cancels = append(g.mu.cancels, env.Wal.WatchAdvances(g.noteAdvance))
	}
	// The mark before the listing: a topic created meanwhile is in both, and added once.
	_, g.mu.created = env.Wal.CreatedSince(-1)
	// The names alone, under one hold of g.mu (no member has g yet). Sorted: the first pass
	// of dispatch goes through the topics in this order, and the group's states are keyed
	// by topic name, so that each store writes keys next to those of the one before (in
	// Pebble's memtable, an insert next to the last is cheap, one anywhere is a search from
	// the top of its skiplist: twice the store's cost over 100,000 topics in map order).
	names := env.Wal.TopicNames()
	slices.Sort(names)
	g.lookedAt.Add(int64(len(names)))
	g.mu.Lock()
	for _, name := range names {
		if g.matches(name) && g.mu.topics[name] == nil {
			g.addTopicLocked(name)
		}
	}
	g.mu.Unlock()
	return g, nil
}

// Conflict names the first setting of want (non-zero) that differs from the group's.
func (g *Group) Conflict(want wal.GroupSettings) *wire.Error {
	diff := func(what, have, asked string) *wire.Error {
		return wire.Errorf(wire.CodeConflict, "group %q has %s %s, this member asks for %s: every member of a group has its settings (set by its first member)", g.Shown, what, have, asked)
	}
	switch {
	case want.Pattern != g.Set.Pattern:
		return diff("pattern", strconv.Quote(g.Set.Pattern), strconv.Quote(want.Pattern))
	case want.AckWait != 0 && want.AckWait != g.Set.AckWait:
		return diff("ack-wait", g.Set.AckWait.String(), want.AckWait.String())
	case want.MaxDeliver != 0 && want.MaxDeliver != g.Set.MaxDeliver:
		return diff("max-deliver", strconv.FormatUint(g.Set.MaxDeliver, 10), strconv.FormatUint(want.MaxDeliver, 10))
	case want.DeadLetter != "" && want.DeadLetter != g.Set.DeadLetter:
		return diff("dead-letter topic", strconv.Quote(g.Set.DeadLetter), strconv.Quote(want.DeadLetter))
	case want.Order != g.Set.Order:
		return diff("order", OrderName(g.Set.Order), OrderName(want.Order))
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
		close(g.Ended)
	}
	return last
}

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
		if _, _, ok := g.env.Wal.Bounds(name); ok { // else deleted since
			g.addIfMatches(name)
		}
	}
}

// matches reports whether topic matches the group's pattern.
func (g *Group) matches(topic string) bool {
	if g.wild {
		return g.match.Match(topic)
	}
	return routing.Match(g.Set.Pattern, topic)
}

// addIfMatches follows topic if it matches the group's pattern and is not followed yet.
func (g *Group) addIfMatches(topic string) {
	g.lookedAt.Add(1)
	if !g.matches(topic) {
		return
	}
	g.mu.Lock()
	if g.mu.topics[topic] == nil {
		g.addTopicLocked(topic)
	}
	g.mu.Unlock()
}

// addTopicLocked follows topic from its stored state, or from the first member's start.
func (g *Group) addTopicLocked(topic string) {
	n := g.env
	if !g.wild {
		g.mu.cancels = append(g.mu.cancels, n.Wal.Notify(topic, g.Wake))
	}
	t := &gtopic{name: topic}
	st, ok := g.mu.stored[topic]
	delete(g.mu.stored, topic)
	// One look at its bounds serves the start, the tracker and whether it is active: a
	// wildcard group follows many topics. (An advance after it is noted: noteAdvance was
	// registered before the listing.)
	first, head, exists := n.Wal.Bounds(topic)
	switch {
	case g.resumeLocked(t, st): // a newer state of it was mirrored from another region
		g.advanceLocked(t)
		g.sortReadyLocked()
		_, head, exists = n.Wal.Bounds(topic)
	case ok:
		t.beginTrack(st, 0, first)
		t.floor, t.next = st.Floor, st.Next
		for _, e := range st.Entries {
			g.restoreLocked(t, e.Offset, e.Deliveries)
		}
		g.advanceLocked(t)
		g.sortReadyLocked()
	case exists && g.lazy(topic):
		// No state stored until the group hands something out: the start is the group's,
		// stored with its settings, the same after a restart.
		start := first
		if g.Set.Start.Kind != wal.GroupFromFirst {
			start, _ = n.Wal.StartOf(topic, g.Set.Start)
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
func (g *Group) lazy(topic string) bool {
	return g.Set.Start.Kind != wal.GroupStartUnknown && g.env.Wal.IsLocal(topic)
}

// restoreLocked puts a stored outstanding record in ready.
func (g *Group) restoreLocked(t *gtopic, off uint64, deliveries uint32) {
	f := &Flight{t: t, off: off, deliveries: deliveries, reason: "the node restarted"}
	switch g.Set.Order {
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

// Store writes the state of the topics that changed since the last store, in one synced
// batch, and returns once it is durable.
func (g *Group) Store(ctx context.Context) error {
	g.storeMu.Lock()
	defer g.storeMu.Unlock()
	g.mu.Lock()
	states := make(map[string]*wal.GroupState, len(g.mu.dirty))
	items := make([]vectorItem, 0, len(g.mu.dirty))
	// The states and their vectors in one allocation each, not one a topic: a wildcard
	// group's store holds a state of each of many topics.
	sts := make([]wal.GroupState, len(g.mu.dirty))
	vecs := make([]wal.GroupVector, len(g.mu.dirty))
	dirty := g.mu.dirty
	g.mu.dirty = nil
	for i, t := range dirty {
		t.dirty = false
		if g.mu.topics[t.name] != t {
			continue // dropped (deleted) since it changed
		}
		st := &sts[i]
		st.Floor, st.Next = t.floor, t.next
		if n := t.out.len(); n > 0 {
			st.Entries = make([]wal.GroupEntry, 0, n)
		}
		for _, f := range t.out.all() { // ascending
			st.Entries = append(st.Entries, wal.GroupEntry{Offset: f.off, Deliveries: f.deliveries})
		}
		st.Vector = t.skipVectorLocked() // with the entries it snapshots (vector.go)
		states[t.name] = st
		items = append(items, vectorItem{topic: t.name, st: st, tr: &t.track, learned: t.learned, vec: &vecs[i]})
		t.learned = nil
	}
	g.mu.Unlock()
	if len(states) == 0 {
		return nil
	}
	g.addVectors(items)
	// grouprepl.go: the settings go with a replicated topic's entry, so every replica has them.
	set := g.Set
	if err := g.env.Store(ctx, g.Name, &set, states); err != nil {
		g.mu.Lock()
		for name := range states {
			if t := g.mu.topics[name]; t != nil {
				g.markDirtyLocked(t)
			}
		}
		g.mu.Unlock()
		return err
	}
	return nil
}

// WaitCh returns what a member waits on when it found nothing to do: the group's change
// channel and the time of the next ack-wait deadline (zero: none).
func (g *Group) WaitCh() (<-chan struct{}, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.changedOut = true
	return g.mu.changed, g.mu.nextDue
}

// DeadLetter appends records that reached max-deliver to the group's dead-letter topic,
// with headers saying why and from where, then marks them done. Without a dead-letter
// topic they are dropped (logged). The append is synced; the group's state is stored after
// it, so a crash in between can write a record to the dead-letter topic twice, never lose it.
func (g *Group) DeadLetter(ctx context.Context, fs []*Flight, shown func(string) string) error {
	n := g.env
	if g.Set.DeadLetter == "" {
		for _, f := range fs {
			n.Log.Warn("group dropped a record after max-deliver (no dead-letter topic)", "group", g.Shown, "topic", f.t.name, "offset", f.off, "deliveries", f.deliveries)
		}
		g.finishDead(fs)
		return nil
	}
	recs := make([]wal.Record, 0, len(fs))
	for _, f := range fs {
		_, err := n.Wal.ReadFunc(f.t.name, f.off, 1, 1<<30, func(r *wal.Record) error {
			hs := make([]wire.Header, 0, len(r.Headers)+6)
			hs = append(hs,
				wire.Header{Key: "quicmq-dead-letter-topic", Value: []byte(shown(f.t.name))},
				wire.Header{Key: "quicmq-dead-letter-offset", Value: strconv.AppendUint(nil, f.off, 10)},
				wire.Header{Key: "quicmq-dead-letter-group", Value: []byte(g.Shown)},
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
		if err := n.AppendDeadLetter(context.WithoutCancel(ctx), g.Set.DeadLetter, recs); err != nil { // grouprepl.go
			return fmt.Errorf("append to dead-letter topic %q: %w", shown(g.Set.DeadLetter), err)
		}
	}
	g.finishDead(fs)
	return g.Store(context.WithoutCancel(ctx))
}

// EndMembers ends every member's stream with e.
func (g *Group) EndMembers(e *wire.Error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for m := range g.mu.members {
		m.End(e)
	}
}

// MemberCount is how many members the group has on this node.
func (g *Group) MemberCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.mu.members)
}

// Follows reports whether the group follows topic.
func (g *Group) Follows(topic string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.topics[topic] != nil
}

// liveTopicState is a live group's state of one topic, as its stored state would be if it
// were stored now: floor, next offset to hand out, outstanding offsets.
type TopicState struct {
	Floor, Next uint64
	Out         []uint64
}

// LiveState is g's state of each of its topics now.
func (g *Group) LiveState() map[string]TopicState {
	g.mu.Lock()
	defer g.mu.Unlock()
	states := make(map[string]TopicState, len(g.mu.list))
	for _, t := range g.mu.list {
		st := TopicState{Floor: t.floor, Next: t.next, Out: make([]uint64, 0, t.out.len())}
		for _, f := range t.out.all() {
			st.Out = append(st.Out, f.off)
		}
		states[t.name] = st
	}
	return states
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
	case g.Wake <- struct{}{}:
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
	g.mu.withOut[t] = struct{}{}
}

// dropOutLocked forgets the outstanding record at off of t; t leaves withOut with its last.
func (g *Group) dropOutLocked(t *gtopic, off uint64) {
	t.out.del(off)
	if t.out.len() == 0 {
		delete(g.mu.withOut, t)
	}
}

// withOutLocked is the topics with outstanding records, counted in passed (tests).
func (g *Group) withOutLocked() map[*gtopic]struct{} {
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
