package replica

import (
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Message is one raft message of one group, as it travels between nodes.
type Message struct {
	Group uint64
	Raft  *pb.Message
	// Quiesce marks the leader's last heartbeat before its group goes
	// quiet: the follower steps it and stops ticking the group.
	Quiesce bool
	// Wake is a follower's word that it knows no leader of the group (it
	// has just reopened the group after a restart, or its leader fell
	// silent): a quiet receiver starts ticking again, so a quiet leader
	// heartbeats it within a tick instead of leaving it to an election
	// timeout, and a follower that still takes the sender for its leader
	// campaigns at once (the sender is not leading: a leader never sends
	// Wake). Raft carries From, To and Term; it is never stepped.
	Wake bool
}

// Transport carries raft messages to other nodes. Send is called on the
// driver's goroutine, at most twice per peer per round: first with a
// leader's appends, before the round's state is durable (the leader's fsync
// overlaps its followers'; it counts itself toward a quorum only once its
// own write is durable), then with every other message of the round, after
// it is durable. It must not
// block for long, nor modify msgs; it may drop (raft resends). EncodeBatch
// gives the batch's wire form, and the receiving side hands what
// DecodeBatch returns to its Driver.Deliver.
type Transport interface {
	Send(to uint64, msgs []Message)
}

// ErrNotLeader is the error of a proposal made to a replica that is not its
// group's leader; the error is a *NotLeaderError naming the leader if known.
var ErrNotLeader = errors.New("replica: not the leader")

// ErrDropped is the error of a proposal that will never commit: another
// leader's entries took its place in the log.
var ErrDropped = errors.New("replica: proposal dropped by a leader change")

// ErrStopped is the error of calls on a driver that has stopped.
var ErrStopped = errors.New("replica: driver stopped")

// ErrUnknownGroup is the error of a call naming a group this node does not hold.
var ErrUnknownGroup = errors.New("replica: unknown group")

// NotLeaderError says which node leads the group, as far as this replica
// knows (0: no leader known).
type NotLeaderError struct {
	Group  uint64
	Leader uint64
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("replica: group %d: not the leader, no leader known", e.Group)
	}
	return fmt.Sprintf("replica: group %d: not the leader, node %d is", e.Group, e.Leader)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
