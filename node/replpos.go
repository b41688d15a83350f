package node

import (
	"context"
	"fmt"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/wal"
)

// Portable positions on replicated topics (docs/architecture.md, "Portable positions").
//
// A durable's position on a replicated topic is a set position entry of the topic's raft
// group carrying its vector (replica's set position layout 2), and a group's state a set
// group entry carrying its (layout 2): every replica stores what the local path stores. What
// federation mirrors in from other regions (POSITION, GROUP_POSITION) is proposed the same
// way (replica.EntryMirrorPosition, EntryMirrorGroup) by the node whose mirror received it,
// its leader as a rule, else passed to the leader with GROUP_STORE; applying it stores it only
// when newer than what is stored, so a replay never moves it back. A durable that starts on
// a replicated topic first has a barrier entry applied here (positionBarrier), so that a new
// leader never reads a position older than one its term committed.

// storableKind reports whether GROUP_STORE may carry an entry of kind k.
func storableKind(k replica.EntryKind) bool {
	return k == replica.EntrySetGroup || k == replica.EntryMirrorPosition || k == replica.EntryMirrorGroup
}

// positionBarrier makes sure that every entry of topic's group committed before is applied
// here before durable's positions on it are read: a barrier entry (a set group entry that
// stores nothing) proposed through the leader, then waited for.
func (r *replicated) positionBarrier(ctx context.Context, durable, topic string) *wire.Error {
	t := r.lookup(topic)
	if t == nil || !t.local {
		return nil // not served from this node's log
	}
	index, e := r.setGroup(ctx, durable, topic, nil)
	if e == nil {
		e = r.waitApplied(ctx, t, index)
	}
	if e != nil {
		return wire.Errorf(e.Code, "durable %q: read its position on %q: %s", durable, topic, e.Message)
	}
	return nil
}

// mirrorPosition is federation's Config.MirrorPosition in a replicated region (nil
// otherwise): a durable's position mirrored from another region, as a mirror position entry
// of the topic's group.
func (n *Node) mirrorPosition() func(context.Context, wal.Position) error {
	if n.raftID == 0 {
		return nil
	}
	return func(ctx context.Context, p wal.Position) error {
		r := n.rep
		t := r.lookup(p.Topic)
		if t == nil {
			return n.wal.SetPosition(ctx, p) // a topic of this node's own log
		}
		return r.proposeMirrored(ctx, t, &replica.WalEntry{Kind: replica.EntryMirrorPosition, Topic: p.Topic, Name: p.Name, Value: p.Value, Vector: p.Vector})
	}
}

// mirrorGroup is federation's Config.MirrorGroup in a replicated region (nil otherwise): a
// group's state mirrored from another region, as a mirror group entry of the topic's group.
func (n *Node) mirrorGroup() func(ctx context.Context, name, topic string, st *wal.GroupState) error {
	if n.raftID == 0 {
		return nil
	}
	return func(ctx context.Context, name, topic string, st *wal.GroupState) error {
		r := n.rep
		t := r.lookup(topic)
		if t == nil {
			_, err := n.wal.SetMirroredGroup(ctx, name, topic, st)
			return err
		}
		return r.proposeMirrored(ctx, t, &replica.WalEntry{Kind: replica.EntryMirrorGroup, Topic: topic, Name: name, Group: &replica.GroupOp{State: st}})
	}
}

// proposeMirrored proposes a mirror position or mirror group entry through t's leader.
func (r *replicated) proposeMirrored(ctx context.Context, t *repTopic, we *replica.WalEntry) error {
	data, err := replica.EncodeEntry(nil, we)
	if err != nil {
		return fmt.Errorf("node: %v %q of %q: %w", we.Kind, we.Name, t.name, err)
	}
	if _, e := r.proposeEntry(ctx, t, we.Name, data); e != nil {
		return fmt.Errorf("node: %v %q of %q: %s", we.Kind, we.Name, t.name, e.Message)
	}
	return nil
}
