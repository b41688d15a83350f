package replica

import (
	"context"
	"fmt"
)

// ProposeAsync is Propose without the wait: it queues the proposal for Run
// (never waiting for Run, so that every proposal made during a round's sync
// enters the next round and shares its fsync), and done is called exactly
// once with the outcome Propose would return (on Run's goroutine, or on the
// caller's when ctx has ended or the driver has stopped). Proposals made
// one after another from one goroutine enter the group's log in that order
// while this node leads, so a publisher's pipelined batches keep their
// order. done must not block. The queue is not bounded: callers bound what
// they have in flight (a leader refuses proposals past
// Config.MaxUncommittedBytes). The driver reads data only until it calls
// done (a leader's engine copies it into its envelope, and raft clones
// that): the caller may reuse data's buffer from done on.
func (d *Driver) ProposeAsync(ctx context.Context, group uint64, data []byte, done func(Result, error)) {
	if err := ctx.Err(); err != nil {
		done(Result{}, fmt.Errorf("replica: propose to group %d: %w", group, err))
		return
	}
	if d.cfg.handOverProposals {
		if err := d.exec(ctx, func(e *engine) { e.propose(group, data, done) }); err != nil {
			done(Result{}, fmt.Errorf("replica: propose to group %d: %w", group, err))
		}
		return
	}
	d.queuePropose(group, data, done)
}

// Progress returns, for a group this node leads, each replica's match index
// (the last entry known to be stored there, this node included); nil when
// this node does not lead the group.
func (d *Driver) Progress(ctx context.Context, group uint64) (map[uint64]uint64, error) {
	ch := make(chan map[uint64]uint64, 1)
	if err := d.exec(ctx, func(e *engine) {
		g, ok := e.groups[group]
		if !ok {
			ch <- nil
			return
		}
		st := g.rn.Status()
		if st.Progress == nil {
			ch <- nil
			return
		}
		m := make(map[uint64]uint64, len(st.Progress))
		for id, pr := range st.Progress {
			m[id] = pr.Match
		}
		ch <- m
	}); err != nil {
		return nil, fmt.Errorf("replica: progress of group %d: %w", group, err)
	}
	return <-ch, nil
}
