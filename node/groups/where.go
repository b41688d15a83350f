package groups

import (
	"context"
	"sync"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Where is where a node's groups keep what they write, and whether a group moved: the
// node's own log (SingleCopy), or the raft groups of its replicated topics (Replicated).
// The node chooses one in New (node/groups.go); no group asks which it has.
type Where interface {
	// Store writes a group's settings (set, when not nil) and the states of its topics that
	// changed, durably. Its states are one per topic, in the order of the topics' names
	// mostly. An error that is a *wire.Error is told to the member as it is.
	Store(ctx context.Context, name string, set *wal.GroupSettings, states []wal.TopicGroupState) error
	// AppendDeadLetter appends records to a dead-letter topic (stored), durably.
	AppendDeadLetter(ctx context.Context, topic string, recs []wal.Record) error
	// Barrier makes sure, before group name (stored) with pattern goes live on this node,
	// that loading its state reads the last one committed.
	Barrier(ctx context.Context, name, pattern string) *wire.Error
	// Placed is closed at the next placement change (a leader change among them), or nil
	// when none can move a group.
	Placed() <-chan struct{}
	// Moved is the error that ends the members of g, whose group another node serves now
	// (its topic's new leader), or nil.
	Moved(g *Group) *wire.Error
}

// SingleCopy keeps a group's state and its dead letters in the node's own log, and no group
// moves: a node of a single-copy region (or a build that ignores replication for groups,
// node/broken_group.go).
type SingleCopy struct{ Wal *wal.Log }

func (s SingleCopy) Store(ctx context.Context, name string, _ *wal.GroupSettings, states []wal.TopicGroupState) error {
	return s.Wal.SetGroupStates(ctx, name, nil, states) // the settings are stored here when the group is made (New)
}

func (s SingleCopy) AppendDeadLetter(ctx context.Context, topic string, recs []wal.Record) error {
	return s.Wal.Append(ctx, wal.AppendRequest{Topic: topic, Records: recs}).Err
}

func (SingleCopy) Barrier(context.Context, string, string) *wire.Error { return nil }
func (SingleCopy) Placed() <-chan struct{}                             { return nil }
func (SingleCopy) Moved(*Group) *wire.Error                            { return nil }

// Raft is what Replicated needs of the node's raft groups (node/grouprepl.go).
type Raft interface {
	// IsReplicated reports whether topic is a replicated topic (placed in a raft group).
	IsReplicated(topic string) bool
	// StoreState proposes op on group name's state of replicated topic as a set group
	// entry of its raft group and returns once it is committed and applied. home: the
	// group's pattern is the topic, so this node serves it as the topic's leader and must
	// propose it itself (a store it cannot propose fails, CodeUnavailable; the members
	// move); otherwise the topic's leader, wherever it is, proposes it.
	StoreState(ctx context.Context, name, topic string, op *replica.GroupOp, home bool) *wire.Error
	// Barrier proposes a barrier entry for group name on topic's raft group and waits until
	// this node has applied it.
	Barrier(ctx context.Context, name, topic string) *wire.Error
	// LeadsElsewhere is the node that leads topic's raft group now when it is not this
	// one, or "" (this node leads it, or nobody does yet).
	LeadsElsewhere(topic string) string
	// Append appends recs to replicated topic (placed if new) and returns once they are
	// committed and applied on its leader.
	Append(ctx context.Context, topic string, recs []wal.Record) *wire.Error
	// Placed is closed at the next placement change.
	Placed() <-chan struct{}
}

// Replicated keeps the state of a group on a replicated topic as replicated state (I10): a
// set group entry of that topic's raft group (replica.EntrySetGroup), proposed by the node
// serving the group, which leads the topic's group (a group whose pattern is one replicated
// topic lives on that topic's leader: node/grouprelay.go's groupHome), and applied by every
// replica under the keys wal.Log.SetGroup writes. So the node that serves the group next
// (the new leader, after a failure or a leader change) loads what was committed, once a
// barrier entry of its own has applied everything before it (Barrier). A store, and so a
// COMMIT's COMMITTED, returns only once every topic's entry is committed and applied here.
//
// A group spanning several topics proposes one entry per topic that changed, each to its
// topic's group, concurrently: each topic's state is atomic, the stores of several topics
// are not (a crash between two of them leaves one topic's state newer than the other's,
// each consistent, which redelivers at worst, never skips). A wildcard group is served by
// its rendezvous home, which asks each topic's leader to propose that topic's entry
// (GROUP_STORE) when it does not lead it itself. The state of a topic of the node's own log
// (not replicated) is stored there, as SingleCopy does.
type Replicated struct {
	Wal    *wal.Log
	Raft   Raft
	Region string // the node's region, for the errors
	// Live reports whether group name (stored) is live on this node already: its state is
	// loaded, and no barrier is needed.
	Live func(name string) bool
}

func (r Replicated) Store(ctx context.Context, name string, set *wal.GroupSettings, states []wal.TopicGroupState) error {
	local := make([]wal.TopicGroupState, 0, len(states))
	var repl []wal.TopicGroupState
	for _, ts := range states {
		if r.Raft.IsReplicated(ts.Topic) {
			repl = append(repl, ts)
		} else {
			local = append(local, ts)
		}
	}
	errs := make([]error, len(repl))
	var wg sync.WaitGroup
	for i, ts := range repl {
		wg.Go(func() {
			if e := r.Raft.StoreState(ctx, name, ts.Topic, &replica.GroupOp{Settings: set, State: ts.State}, set != nil && set.Pattern == ts.Topic); e != nil {
				errs[i] = e
			}
		})
	}
	var err error
	if len(local) > 0 {
		err = r.Wal.SetGroupStates(ctx, name, nil, local) // the settings are stored here when the group is made
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e // a *wire.Error: the client is told why (a leader change, no quorum)
		}
	}
	return err
}

// AppendDeadLetter appends to the node's own log when the dead-letter topic is one of it,
// else through the topic's raft group (the topic is placed if it is new).
func (r Replicated) AppendDeadLetter(ctx context.Context, topic string, recs []wal.Record) error {
	if r.Wal.IsLocal(topic) {
		return r.Wal.Append(ctx, wal.AppendRequest{Topic: topic, Records: recs}).Err
	}
	if e := r.Raft.Append(ctx, topic, recs); e != nil {
		return e
	}
	return nil
}

// Barrier makes sure that every entry of the group's replicated topics' raft groups
// committed before is applied here, so that loading its state reads the last committed one:
// a new leader may not have applied all it has committed yet, and a follower serving a
// wildcard group may lag. Nothing to do for a group live here already, nor for topics that
// are not replicated.
func (r Replicated) Barrier(ctx context.Context, name, pattern string) *wire.Error {
	if r.Live(name) {
		return nil
	}
	var topics []string
	if routing.IsLiteral(pattern) {
		if r.Raft.IsReplicated(pattern) {
			topics = append(topics, pattern)
		}
	} else {
		for _, ti := range r.Wal.Topics() {
			if routing.Match(pattern, ti.Name) && r.Raft.IsReplicated(ti.Name) {
				topics = append(topics, ti.Name)
			}
		}
	}
	errs := make([]*wire.Error, len(topics))
	var wg sync.WaitGroup
	for i, topic := range topics {
		wg.Go(func() { errs[i] = r.Raft.Barrier(ctx, name, topic) })
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (r Replicated) Placed() <-chan struct{} { return r.Raft.Placed() }

// Moved: g's pattern is a replicated topic that another node leads now (members subscribe
// again and are sent there).
func (r Replicated) Moved(g *Group) *wire.Error {
	p := g.set.Pattern
	if !routing.IsLiteral(p) || !r.Raft.IsReplicated(p) {
		return nil
	}
	lead := r.Raft.LeadsElsewhere(p)
	if lead == "" {
		return nil
	}
	return wire.Errorf(wire.CodeUnavailable, "group %q: topic %q of region %q is now led by node %q, which serves the group from its replicated state: subscribe again",
		g.shown, p, r.Region, lead)
}
