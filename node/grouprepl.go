package node

import (
	"context"
	"errors"
	"sync"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Consumer group state on replicated topics is replicated state (I10): a group's state of a
// replicated topic is stored as a set group entry of that topic's raft group
// (replica.EntrySetGroup), proposed by the node serving the group, which leads the topic's
// group (a group whose pattern is one replicated topic lives on that topic's leader:
// groupHome), and applied by every replica under the keys wal.Log.SetGroup writes. So the
// node that serves the group next (the new leader, after a failure or a leader change)
// loads what was committed, once a barrier entry of its own has applied everything before
// it. A store, and so a COMMIT's COMMITTED, returns only once every topic's entry is
// committed and applied here.
//
// A group spanning several topics proposes one entry per topic that changed, each to its
// topic's group, concurrently: each topic's state is atomic, the stores of several topics
// are not (a crash between two of them leaves one topic's state newer than the other's,
// each consistent, which redelivers at worst, never skips). The state of a topic this node
// does not lead (a wildcard group, served by its rendezvous home) is stored in its local
// log, as before replication.

// groupStateLocalOnly is true only in a binary built with -tags quicmq_broken_group
// (broken_group.go): group state is then stored in the serving node's own log alone, as
// before replication, so that the leader-change tests (grouprepl_test.go) can be shown to
// fail on it. No release is built with the tag.
var groupStateLocalOnly bool

// storeGroup stores a group's settings (set, when not nil) and states: those of replicated
// topics this node leads through their raft groups, the rest in one synced batch of the
// local log. It returns once all are stored; the error is a *wire.Error for a replicated
// store that did not commit.
func (n *Node) storeGroup(ctx context.Context, name string, set *wal.GroupSettings, states map[string]*wal.GroupState) error {
	local := states
	var repl []string
	if r := n.rep; r != nil && !groupStateLocalOnly {
		local = make(map[string]*wal.GroupState, len(states))
		for topic, st := range states {
			switch {
			case !r.isReplicated(topic):
				local[topic] = st
			case set != nil && set.Pattern == topic, r.leaderName(topic) == n.cfg.Name:
				// A group of one replicated topic lives on its leader: a store there that
				// does not commit (the leader changed) fails, and the members move.
				repl = append(repl, topic)
			default:
				local[topic] = st // a wildcard group's topic led elsewhere
			}
		}
	}
	errs := make([]error, len(repl))
	var wg sync.WaitGroup
	for i, topic := range repl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e := n.rep.setGroup(ctx, name, topic, &replica.GroupOp{Settings: set, State: states[topic]}); e != nil {
				errs[i] = e
			}
		}()
	}
	var err error
	if len(local) > 0 {
		err = n.wal.SetGroup(ctx, name, set, local)
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e // a *wire.Error: the client is told why (a leader change, no quorum)
		}
	}
	return err
}

// groupBarrier makes sure, before a group whose pattern is a replicated topic goes live on
// this node (its leader), that every entry of the topic's group committed before is applied
// here, so that loading its state reads the last committed one: a new leader may not have
// applied all it has committed yet. Nothing to do for other groups.
func (n *Node) groupBarrier(ctx context.Context, name, pattern string) *wire.Error {
	r := n.rep
	if r == nil || groupStateLocalOnly || !routing.IsLiteral(pattern) || !r.isReplicated(pattern) || n.liveGroup(name) != nil {
		return nil
	}
	return r.setGroup(ctx, name, pattern, nil)
}

// groupMoved says why a live group must end here: its pattern is a replicated topic that
// another node leads now (members subscribe again and are sent there), or nil.
func (g *group) groupMoved() *wire.Error {
	n := g.n
	r := n.rep
	if r == nil || !routing.IsLiteral(g.set.Pattern) || !r.isReplicated(g.set.Pattern) {
		return nil
	}
	lead := r.leaderName(g.set.Pattern) // as observe last saw it: cheap, maybe behind
	if lead == "" || lead == n.cfg.Name {
		return nil
	}
	if t := r.lookup(g.set.Pattern); t != nil {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Raft.ObserveInterval)
		st, err := r.d.Status(ctx, t.group)
		cancel()
		if err != nil || st.Lead == 0 || st.Lead == r.id {
			return nil // this node leads it (observe has not seen it yet), or nobody does yet
		}
		lead = t.nameOf(st.Lead)
	}
	return wire.Errorf(wire.CodeUnavailable, "group %q: topic %q of region %q is now led by node %q, which serves the group from its replicated state: subscribe again",
		g.shown, g.set.Pattern, n.cfg.Region, lead)
}

// setGroup proposes op (nil: a barrier) on group name's state of a replicated topic
// through the topic's raft group (this node must lead it) and returns once the entry is
// committed and applied here.
func (r *replicated) setGroup(ctx context.Context, name, topic string, op *replica.GroupOp) *wire.Error {
	t := r.lookup(topic)
	if t == nil {
		return wire.Errorf(wire.CodeInternal, "topic %q is not a replicated topic", topic)
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	res := r.sm.Propose(ctx, r.d, &replica.WalEntry{Kind: replica.EntrySetGroup, Topic: topic, Name: name, Group: op})
	var nl *replica.NotLeaderError
	switch {
	case res.Err == nil:
		return nil
	case errors.Is(res.Err, context.DeadlineExceeded):
		return r.noQuorum(t, "did not store the consumer group's state")
	case errors.As(res.Err, &nl), errors.Is(res.Err, replica.ErrDropped):
		return wire.Errorf(wire.CodeUnavailable, "group %q: node %q no longer leads topic %q (now %s): the group's state was not stored here; subscribe again",
			name, r.n.cfg.Name, topic, cmpOr(t.nameOf(leaderOfErr(nl)), "unknown"))
	case errors.Is(res.Err, replica.ErrStopped), errors.Is(res.Err, context.Canceled):
		return wire.Errorf(wire.CodeShuttingDown, "node shutting down before the state of group %q on %q was stored", name, topic)
	}
	return wire.Errorf(wire.CodeInternal, "group %q: store its state of %q: %v", name, topic, res.Err)
}

func leaderOfErr(nl *replica.NotLeaderError) uint64 {
	if nl == nil {
		return 0
	}
	return nl.Leader
}

// placeChanged is closed at the next placement change (a leader change among them) when
// the node has replicated topics; nil, which never fires, otherwise.
func (n *Node) placeChanged() <-chan struct{} {
	if n.rep == nil || n.place == nil {
		return nil
	}
	return n.place.changedCh()
}
