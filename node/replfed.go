package node

import (
	"context"
	"fmt"
	"strconv"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/replica"
)

// What the federation's links carry for the replicated path: raft messages and catch-up
// fetches between the nodes of the region, and which node mirrors a replicated topic.

// raftPeerID is the raft ID a member advertises in gossip (0: none).
func raftPeerID(m gossip.Member) uint64 {
	id, _ := strconv.ParseUint(m.Tags[tagRaft], 10, 64)
	return id
}

// deliverRaft hands a peer's raft messages to the driver (federation's Raft.Deliver).
func (n *Node) deliverRaft(msgs []replica.Message) {
	if r := n.rep; r != nil {
		r.d.Deliver(msgs)
	}
}

// fetchRaft is federation's RaftConfig.Fetch: a peer's catch-up reads records from this
// node's logs of a group, as applied here.
func (n *Node) fetchRaft(group uint64, log string, from, to, maxBytes uint64) ([]byte, uint64, error) {
	r := n.rep
	if r == nil {
		return nil, 0, fmt.Errorf("node %q holds no replicated topics", n.cfg.Name)
	}
	return r.d.ReadChunk(group, log, from, to, maxBytes)
}

// mirrorWanted is federation's Config.MirrorWanted in a replicated region (nil otherwise):
// every topic placed in the region is mirrored in by its leader, whichever node its
// subscribers are on.
func (n *Node) mirrorWanted() func(string) bool {
	if n.raftID == 0 {
		return nil
	}
	return func(topic string) bool { return n.topics.IsReplicated(topic) }
}

// mirrorAppend is federation's Config.MirrorAppend in a replicated region (nil otherwise):
// a mirror's records and cursor as one raft entry that also compares the cursor.
func (n *Node) mirrorAppend() func(context.Context, federation.MirrorAppend) error {
	if n.raftID == 0 {
		return nil
	}
	return func(ctx context.Context, a federation.MirrorAppend) error {
		r := n.rep
		t := r.lookup(a.Topic)
		if t == nil {
			return fmt.Errorf("node: mirror of %q: not a replicated topic of region %q", a.Topic, n.cfg.Region)
		}
		ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
		defer cancel()
		res := r.sm.Propose(ctx, r.d, &replica.WalEntry{Kind: replica.EntryMirrorAppend, Topic: a.Topic, Region: a.Region,
			Name: a.Cursor, HasExpected: a.HasExpected, Expected: a.Expected, Records: a.Records, Value: a.Value})
		if res.Err != nil {
			return fmt.Errorf("node: replicated mirror append of %q: %w", a.Topic, res.Err)
		}
		return nil
	}
}

// shouldMirror reports whether this node mirrors topic into its region: it leads the
// topic's group. A topic not placed yet is placed in the background (a mirror wants it).
// It never blocks (federation's ShouldMirror).
func (r *replicated) shouldMirror(topic string) bool {
	if !r.isReplicated(topic) {
		r.placeLater(topic)
		return false
	}
	return r.leaderName(topic) == r.n.cfg.Name
}
