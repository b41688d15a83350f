package replica

import (
	"context"
	"errors"
	"fmt"
)

// ErrLeadershipMoving refuses a proposal made while the group's leader hands its leadership
// to another replica (TransferLeadership): raft would drop it. Nothing was appended; the new
// leader takes it within a round trip.
var ErrLeadershipMoving = errors.New("leadership moving")

func leadershipMoving(group, to uint64) error {
	return fmt.Errorf("replica: group %d: %w to node %d", group, ErrLeadershipMoving, to)
}

// TransferLeadership asks the group's leader to hand its leadership to the voter to (etcd
// raft's leadership transfer): the leader first brings to's log up to its own, then tells
// it to stand at once (MsgTimeoutNow), and to wins the election that follows without an
// election timeout. Called on a follower, raft forwards the request to the leader it knows.
// It returns once raft has taken the request, not when leadership has moved: watch Role
// for that. Raft refuses (silently) a transfer to a learner or to itself, and gives up a
// transfer that has not completed within an election timeout; while one is in progress
// the leader refuses new proposals (ErrLeadershipMoving: raft would drop them, and nothing
// is appended), so a caller picks a transferee that is caught up, which makes the transfer
// take one round trip.
//
// It runs on Run's goroutine like every change to a group's RawNode, and wakes a quiet
// group: a quiet leader would otherwise not send the appends the transfer may need.
func (d *Driver) TransferLeadership(ctx context.Context, group, to uint64) error {
	errc := make(chan error, 1)
	err := d.exec(ctx, func(e *engine) { errc <- e.transferLeadership(group, to) })
	if err == nil {
		err = <-errc
	}
	if err != nil {
		return fmt.Errorf("replica: transfer leadership of group %d to %d: %w", group, to, err)
	}
	return nil
}

func (e *engine) transferLeadership(id, to uint64) error {
	g, ok := e.groups[id]
	if !ok {
		return fmt.Errorf("%w %d", ErrUnknownGroup, id)
	}
	if e.failed != nil {
		return e.failed
	}
	e.setQuiet(g, false)
	g.idle = 0
	e.touch(g)
	g.rn.TransferLeader(to)
	e.roles.set(g) // Role.Moving, for callers routing proposals
	return nil
}
