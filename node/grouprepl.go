package node

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/wal"
)

// What the replicated groups (node/groups.Replicated: a group's state on a replicated topic
// is replicated state, I10) need of the node's raft groups: groupRaft, over the replicated
// path; and the proposals it makes (setGroup, proposeEntry, storeGroupState), also used for
// durable positions (replpos.go) and management (node/manage/here_groups.go), and their peer side
// (serveGroupStore).

// groupStateLocalOnly is true only in a binary built with -tags quicmq_broken_group
// (broken_group.go): group state is then stored in the serving node's own log alone, as
// before replication, so that the leader-change tests (grouprepl_test.go) can be shown to
// fail on it. No release is built with the tag.
var groupStateLocalOnly bool

// groupRaft is the node's raft groups as groups.Replicated sees them.
type groupRaft struct{ r *replicated }

func (g groupRaft) IsReplicated(topic string) bool { return g.r.isReplicated(topic) }

func (g groupRaft) StoreState(ctx context.Context, name, topic string, op *replica.GroupOp, home bool) *wire.Error {
	return g.r.storeGroupState(ctx, name, topic, op, home)
}

func (g groupRaft) Barrier(ctx context.Context, name, topic string) *wire.Error {
	index, e := g.r.setGroup(ctx, name, topic, nil)
	if e == nil {
		e = g.r.waitApplied(ctx, g.r.lookup(topic), index)
	}
	return e
}

func (g groupRaft) LeadsElsewhere(topic string) string {
	r := g.r
	lead := r.leaderName(topic) // as observe last saw it: cheap, maybe behind
	if lead == "" || lead == r.n.cfg.Name {
		return ""
	}
	if t := r.lookup(topic); t != nil {
		ctx, cancel := context.WithTimeout(context.Background(), r.n.cfg.Raft.ObserveInterval)
		st, err := r.d.Status(ctx, t.group)
		cancel()
		if err != nil || st.Lead == 0 || st.Lead == r.id {
			return "" // this node leads it (observe has not seen it yet), or nobody does yet
		}
		lead = t.nameOf(st.Lead)
	}
	return lead
}

func (g groupRaft) Append(ctx context.Context, topic string, recs []wal.Record) *wire.Error {
	return g.r.appendReplicated(ctx, topic, recs)
}

func (g groupRaft) Placed() <-chan struct{} {
	if g.r.n.place == nil {
		return nil
	}
	return g.r.n.place.Changed()
}

// groupsLocalOnly is the groups' Where of a replicated node built with quicmq_broken_group:
// state and dead letters in the serving node's own log, moves as with Replicated.
type groupsLocalOnly struct {
	groups.SingleCopy
	moves groups.Replicated
}

func (l groupsLocalOnly) Placed() <-chan struct{}           { return l.moves.Placed() }
func (l groupsLocalOnly) Moved(g *groups.Group) *wire.Error { return l.moves.Moved(g) }

// setGroup stores op (nil: a barrier) on group name's state of a replicated topic as a
// set group entry of the topic's raft group: proposed here when this node leads it, else
// by the leader, asked with GROUP_STORE. It returns once the entry is committed and applied
// on the proposer, with the entry's raft index.
func (r *replicated) setGroup(ctx context.Context, name, topic string, op *replica.GroupOp) (uint64, *wire.Error) {
	t := r.lookup(topic)
	if t == nil {
		return 0, wire.Errorf(wire.CodeInternal, "topic %q is not a replicated topic", topic)
	}
	data, err := replica.EncodeEntry(nil, &replica.WalEntry{Kind: replica.EntrySetGroup, Topic: topic, Name: name, Group: op})
	if err != nil {
		return 0, wire.Errorf(wire.CodeInternal, "group %q: encode its state of %q: %v", name, topic, err)
	}
	return r.proposeEntry(ctx, t, name, data)
}

// proposeEntry proposes data, an entry of t's group that GROUP_STORE carries (a set group,
// a mirror position or a mirror group entry of consumer name), here when this node leads
// the group, else by the leader, asked with GROUP_STORE. It returns once the entry is
// committed and applied on the proposer, with the entry's raft index.
func (r *replicated) proposeEntry(ctx context.Context, t *repTopic, name string, data []byte) (uint64, *wire.Error) {
	topic := t.name
	ctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	index, e, lead := r.proposeGroup(ctx, t, name, data)
	if lead == 0 {
		return index, e
	}
	// Another node leads the topic's group (or is being elected): ask the leader.
	if !t.local || lead == r.id || !r.reachable(t.nameOf(lead)) {
		var we *wire.Error
		if lead, we = r.waitLeader(ctx, t); we != nil {
			return 0, we
		}
		if lead == r.id {
			index, e, _ = r.proposeGroup(ctx, t, name, data)
			return index, e
		}
	}
	e = r.n.askNode(ctx, t.nameOf(lead), &wire.GroupStore{Topic: topic, Entry: data}, func(f wire.Frame) error {
		if d, ok := f.(*wire.Done); ok {
			index = d.Count
		}
		return nil
	})
	return index, e
}

// proposeGroup proposes a set group entry of t here. lead is the raft ID of the node to
// ask instead when this one does not lead t's group (r.id: unknown yet), else 0.
func (r *replicated) proposeGroup(ctx context.Context, t *repTopic, name string, data []byte) (index uint64, e *wire.Error, lead uint64) {
	if !t.local {
		return 0, nil, r.id
	}
	res, err := r.d.Propose(ctx, t.group, data)
	var nl *replica.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return 0, nil, cmp.Or(nl.Leader, r.id)
	case errors.Is(err, replica.ErrLeadershipMoving):
		return 0, nil, r.id // a drain, the balancer or a stop hands it on: ask the next leader
	case err == nil:
		if ar, ok := res.Detail.(*wal.AppendResult); ok && ar.Err != nil {
			return 0, wire.Errorf(wire.CodeInvalidArgument, "group %q: its state of %q was refused: %v", name, t.name, ar.Err), 0
		}
		return res.Index, nil, 0
	case errors.Is(err, context.DeadlineExceeded):
		return 0, r.noQuorum(t, "did not store the consumer group's state"), 0
	case errors.Is(err, replica.ErrDropped):
		return 0, wire.Errorf(wire.CodeUnavailable, "group %q: the leader of %q changed before its state was stored: subscribe again", name, t.name), 0
	case errors.Is(err, replica.ErrStopped), errors.Is(err, context.Canceled):
		return 0, wire.Errorf(wire.CodeShuttingDown, "node shutting down before the state of group %q on %q was stored", name, t.name), 0
	}
	return 0, wire.Errorf(wire.CodeInternal, "group %q: store its state of %q: %v", name, t.name, err), 0
}

// storeGroupState stores op on group name's state of a replicated topic. home: the group's
// pattern is the topic, so the group lives on its leader, this node: a store here that the
// leader's loss or a leader change keeps from committing fails (CodeUnavailable), and the
// members move to the new leader, never passed on to it, where the group may be live
// already. A wildcard group's store is proposed by the topic's leader, wherever it is.
func (r *replicated) storeGroupState(ctx context.Context, name, topic string, op *replica.GroupOp, home bool) *wire.Error {
	if !home {
		_, e := r.setGroup(ctx, name, topic, op)
		return e
	}
	t := r.lookup(topic)
	data, err := replica.EncodeEntry(nil, &replica.WalEntry{Kind: replica.EntrySetGroup, Topic: topic, Name: name, Group: op})
	if err != nil {
		return wire.Errorf(wire.CodeInternal, "group %q: encode its state of %q: %v", name, topic, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	_, e, lead := r.proposeGroup(ctx, t, name, data)
	if lead != 0 {
		return wire.Errorf(wire.CodeUnavailable, "group %q: node %q no longer leads topic %q (now %s): the group's state was not stored here; subscribe again",
			name, r.n.cfg.Name, topic, cmpOr(t.nameOf(lead), "unknown"))
	}
	return e
}

// waitApplied waits until this node has applied t's group up to index (a barrier another
// node proposed), up to QuorumTimeout.
func (r *replicated) waitApplied(ctx context.Context, t *repTopic, index uint64) *wire.Error {
	ctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	poll := time.NewTicker(r.n.cfg.Raft.TickInterval)
	defer poll.Stop()
	for {
		st, err := r.d.Status(ctx, t.group)
		if err == nil && st.Applied >= index {
			return nil
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			return wire.Errorf(wire.CodeUnavailable, "topic %q: this node did not apply its group's log up to index %d within %v", t.name, index, r.n.cfg.Raft.QuorumTimeout)
		}
	}
}

// serveGroupStore serves a GROUP_STORE from a node of this region: this node proposes the
// set group entry it carries if it leads the topic's group (else it refuses, naming the
// leader), and answers DONE with the entry's index once it is committed and applied here.
func (s *session) serveGroupStore(str *quic.Stream, f *wire.GroupStore) {
	n := s.n
	e := func() *wire.Error {
		switch {
		case !s.peer || s.peerRegion() != n.cfg.Region:
			return wire.Errorf(wire.CodeForbidden, "GROUP_STORE is for the nodes of a region")
		case n.rep == nil:
			return wire.Errorf(wire.CodeInvalidArgument, "node %q has no replicated topics", n.cfg.Name)
		}
		we, err := replica.DecodeEntry(f.Entry)
		switch {
		case err != nil:
			return wire.Errorf(wire.CodeInvalidArgument, "GROUP_STORE of %q: %v", f.Topic, err)
		case !storableKind(we.Kind) || we.Topic != f.Topic:
			return wire.Errorf(wire.CodeInvalidArgument, "GROUP_STORE of %q carries a %v entry of %q: only a set group, mirror position or mirror group entry of its topic", f.Topic, we.Kind, we.Topic)
		}
		t := n.rep.lookup(f.Topic)
		if t == nil {
			return wire.Errorf(wire.CodeNotFound, "topic %q is not a replicated topic of region %q as node %q knows", f.Topic, n.cfg.Region, n.cfg.Name)
		}
		ctx, cancel := context.WithTimeout(s.ctx, n.cfg.Raft.QuorumTimeout)
		defer cancel()
		index, e, lead := n.rep.proposeGroup(ctx, t, we.Name, f.Entry)
		if lead != 0 {
			return wire.Errorf(wire.CodeUnavailable, "node %q does not lead topic %q (as far as it knows: %s): retry",
				n.cfg.Name, f.Topic, cmpOr(t.nameOf(lead), "nobody yet"))
		}
		if e == nil {
			w := wire.NewWriter(str)
			w.Buffer(&wire.Done{Count: index})
			if w.Flush() == nil {
				str.Close()
			}
		}
		return e
	}()
	if e != nil {
		s.failStream(str, e)
	}
}

// appendReplicated appends recs to a replicated topic: proposed here when this node leads
// its group, else published to the leader over a peer stream, as a relayed publish (which
// the leader answers once the records are committed and applied there).
func (r *replicated) appendReplicated(ctx context.Context, topic string, recs []wal.Record) *wire.Error {
	t, e := r.ensure(ctx, topic, false)
	if e != nil {
		return e
	}
	lead, e := r.waitLeader(ctx, t)
	if e != nil {
		return e
	}
	if lead == r.id {
		ch := make(chan wal.AppendResult, 1)
		r.propose(topic, recs, func(res wal.AppendResult) { ch <- res })
		res := <-ch
		var re *replicatedError
		switch {
		case res.Err == nil:
			return nil
		case errors.As(res.Err, &re):
			return re.e
		}
		return wire.Errorf(wire.CodeInternal, "append to %q: %v", topic, res.Err)
	}
	leader := t.nameOf(lead)
	ctx, cancel := context.WithTimeout(ctx, 2*r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	str, err := r.n.fed.OpenStreamTo(ctx, leader)
	if err != nil {
		return wire.Errorf(wire.CodeUnavailable, "append to %q: its leader, node %q, cannot be reached: %v", topic, leader, err)
	}
	stop := context.AfterFunc(ctx, func() {
		str.CancelRead(wire.AppCancelled)
		str.CancelWrite(wire.AppCancelled)
	})
	defer stop()
	defer str.CancelRead(wire.AppCancelled)
	w := wire.NewWriter(str)
	for i := range recs {
		hs := make([]wire.Header, len(recs[i].Headers))
		for j, h := range recs[i].Headers {
			hs[j] = wire.Header{Key: h.Key, Value: h.Value}
		}
		w.Buffer(&wire.Publish{Seq: uint64(i), Topic: topic, Headers: hs, Payload: recs[i].Payload})
	}
	if err := w.Flush(); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "append to %q through its leader, node %q: %v", topic, leader, err)
	}
	rd := wire.NewReader(str, wire.Limits{})
	for answered := 0; answered < len(recs); {
		f, err := rd.Read()
		if err != nil {
			return wire.Errorf(wire.CodeUnavailable, "append to %q through its leader, node %q: %d of %d records answered: %v", topic, leader, answered, len(recs), err)
		}
		switch f := f.(type) {
		case *wire.PublishAck:
			answered++
		case *wire.PublishAcks:
			answered += int(f.Count)
		case *wire.PublishError:
			return wire.Errorf(f.Code, "append to %q through its leader, node %q: %s", topic, leader, f.Message)
		case *wire.ErrorFrame:
			return wire.Errorf(f.Code, "append to %q through its leader, node %q: %s", topic, leader, f.Message)
		}
	}
	str.Close()
	return nil
}
