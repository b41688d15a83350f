package node

import (
	"fmt"
	"time"
)

// MaxReplicas is the largest Config.Replicas.
const MaxReplicas = 7

// RaftSettings are the timers and bounds of a node's replicated topics (Config.Raft). The
// zero value takes every default.
type RaftSettings struct {
	// TickInterval is one raft tick. Default 50 ms: with ElectionTicks 10, a follower of a
	// busy group stands for election 0.5-1.0 s after its leader's last heartbeat, so a
	// leader's loss costs publishes about that long; an active group heartbeats every tick
	// (coalesced per node pair: one small message per peer per tick for all its groups).
	// Raise it for a region whose nodes are far apart (a tick should be several round trips).
	TickInterval time.Duration
	// ElectionTicks is the election timeout in ticks: a follower that hears nothing from its
	// leader for this long (randomized up to twice it) stands for election. Default 10.
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval in ticks. Default 1.
	HeartbeatTicks int
	// QuorumTimeout bounds how long a publish to a replicated topic waits for its group to
	// have a leader, and how long its group may go without progress (an entry applied, or
	// its leader still holding a quorum) while the publish waits to commit; past it the
	// publish is answered with PUBLISH_ERROR unavailable naming the replicas that cannot be
	// reached (or its stream ends, when the outcome is unknown). A publish queued behind
	// others while its group progresses waits up to 6 QuorumTimeouts (at least 30 s). It also bounds a
	// topic's creation through the region's metadata group. Default 5 s.
	QuorumTimeout time.Duration
	// ObserveInterval is how often the node reads its groups' raft status: for the
	// quicmq_raft_* metrics, and to notice a leader change (subscriptions relayed to an old
	// leader then move). Default TickInterval x ElectionTicks / 2.
	ObserveInterval time.Duration
	// DisableQuiescence keeps every group ticking and heartbeating while idle: a follower
	// then notices its leader's loss after the election timeout (0.5-1 s with the defaults)
	// instead of when gossip declares the leader's node failed (about 5 s with serf's LAN
	// timers), at the cost of one coalesced heartbeat per group per tick to each peer.
	// Default false: idle groups are quiet.
	DisableQuiescence bool
	// DisableLogCompaction keeps every raft entry of every group forever. By default each
	// group's leader discards, every 64 applied entries or 4 MiB, the log up to what every replica
	// has stored (keeping at most 10,000 applied entries for a replica behind), so a record
	// is stored once on disk (in its topic's log) rather than twice; a replica further
	// behind than that, or restarted with an empty disk, catches up through a snapshot
	// (metadata only) and the records fetched from its leader's log. Turning it off is a
	// fallback for an operator who suspects the catch-up path; the raft log then grows with
	// every record.
	DisableLogCompaction bool
	// GroupsPerNode sizes the region's raft groups, each holding many topics: the metadata
	// leader keeps about this many groups per node for each replica count (rounded up to a
	// multiple of the region's nodes, so each leads as many), and adds groups when the
	// region grows; topics placed stay in their group. The leader's setting is the one that
	// counts. Default 0: two per core, at least 4. Negative: one group per topic, the layout
	// of regions formed before 2026-12-05 (slower and costlier with many topics; kept for
	// comparison).
	GroupsPerNode int
	// BalanceInterval is how often at most a node hands one of its data groups' leaderships
	// to a replica that leads two or more groups fewer, so that the region's nodes that are
	// up and not drained lead within one of each other (node/relocate). Default 10 s; negative:
	// the balancer is off (leaders stay where elections put them).
	BalanceInterval time.Duration
	// Moves bounds the replica moves in progress at once in the region: removals' (quicmq
	// nodes remove), replacements' (ReplaceAfter) and the replica balancer's, each a catch-up
	// of one group on its new node. The metadata leader's setting counts. Default 2.
	Moves int
	// DisableReplicaBalance turns the replica balancer off: by default the metadata leader
	// moves replicas (learner, catch up, promote, then remove the old one; at most Moves at
	// once) until every node that is up, not drained and not being removed holds within one
	// of as many groups as the others, so a node that joins takes its share of the groups
	// that exist. The metadata leader's setting counts. Default false.
	DisableReplicaBalance bool
	// ReplaceAfter: a node of the region that has been down (not alive in gossip) this long
	// without a pause is removed as dead, as 'quicmq nodes remove --dead' does: its
	// replicas are re-created on the other nodes from the survivors, and it leaves the
	// region for good (it may come back only under another name, with an empty data
	// directory). Only one node is replaced at a time, never a drained one (an operator
	// drains a node before its maintenance), and never when the region would keep fewer
	// nodes than Replicas. The metadata leader's setting and clock count. Default 0:
	// off.
	ReplaceAfter time.Duration
	// StopHandOff bounds how long a graceful stop (SIGTERM, Run's context ending) waits for
	// this node's leaderships to move to other replicas before it closes its sessions and
	// links: publishes then see a leader change of one round trip instead of an election
	// timeout. Default 3 s; negative: no hand-off.
	StopHandOff time.Duration
	// PredictPlacement has a node relay a new topic's first publish at once to the leader
	// of the group its placement will most likely name, which waits for the placement
	// itself (node/replpredict.go), instead of waiting for the placement before relaying.
	// Off by default: on a loaded machine it measured no faster (docs/benchmarks.md, "With
	// real processes"). Default false.
	PredictPlacement bool
}

func (r RaftSettings) withDefaults() RaftSettings {
	if r.TickInterval <= 0 {
		r.TickInterval = 50 * time.Millisecond
	}
	if r.ElectionTicks <= 0 {
		r.ElectionTicks = 10
	}
	if r.HeartbeatTicks <= 0 {
		r.HeartbeatTicks = 1
	}
	if r.QuorumTimeout <= 0 {
		r.QuorumTimeout = 5 * time.Second
	}
	if r.BalanceInterval == 0 {
		r.BalanceInterval = 10 * time.Second
	}
	if r.Moves <= 0 {
		r.Moves = 2
	}
	if r.StopHandOff == 0 {
		r.StopHandOff = 3 * time.Second
	}
	if r.ObserveInterval <= 0 {
		r.ObserveInterval = r.TickInterval * time.Duration(r.ElectionTicks) / 2
	}
	return r
}

// TestRaftSettings are fast raft timers for tests on loopback: 20 ms ticks, elections
// after 200-400 ms. The leader balancer, the replica balancer and the stop's hand-off are
// off, so that a test knows who leads and holds what from elections and placement alone; a
// test of them turns them on.
func TestRaftSettings() RaftSettings {
	return RaftSettings{TickInterval: 20 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1, QuorumTimeout: 5 * time.Second,
		BalanceInterval: -1, StopHandOff: -1, DisableReplicaBalance: true}
}

func (c Config) validateReplicas() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("node: config: "+format, args...)) }
	if c.Replicas < 0 || c.Replicas > MaxReplicas {
		bad("Replicas %d: want 1 to %d (odd recommended)", c.Replicas, MaxReplicas)
	}
	if c.Replicas > 1 && c.GossipLAN == "" {
		bad("Replicas %d needs GossipLAN: the replicas of a topic are nodes of one region", c.Replicas)
	}
	r := c.Raft
	if r.TickInterval < 0 || r.ElectionTicks < 0 || r.HeartbeatTicks < 0 || r.QuorumTimeout < 0 || r.ObserveInterval < 0 || r.Moves < 0 || r.ReplaceAfter < 0 {
		bad("Raft: no field may be negative")
	}
	if d := r.withDefaults(); d.ElectionTicks <= d.HeartbeatTicks {
		bad("Raft.ElectionTicks (%d) must be greater than Raft.HeartbeatTicks (%d)", d.ElectionTicks, d.HeartbeatTicks)
	}
	return errs
}
