package node

import (
	"context"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/node/subscriptions"
)

// The node's side of exclusive durables (node/subscriptions: the lock table and holder
// streams): where a durable's lock is taken, and which subscriptions end when a lock held
// at another home is lost.

// consumers is the node's table of live groups. A small struct under its mutex:
// subscriptions of many sessions take and release entries.
type consumers struct {
	mu struct {
		sync.Mutex
		groups map[string]*groups.Group // live groups by name, with its tenant namespace (node/groups)
		// fenced names the groups a reset or removal is working on (node/manage): no
		// member joins them meanwhile. The value says which operation.
		fenced map[string]string
	}
}

// newLocks makes the node's table of exclusive durables (node/subscriptions).
func (n *Node) newLocks() *subscriptions.Locks {
	return subscriptions.NewLocks(subscriptions.LockConfig{
		Node: n.cfg.Name, Region: n.cfg.Region, Timeout: n.cfg.ManageTimeout, Stop: n.stop,
		Open: func(ctx context.Context, node string) (*quic.Stream, error) { return n.fed.OpenStreamTo(ctx, node) },
	})
}

// lockDurable takes the exclusive lock of durable name (namespaced; shown to the client as
// shown) for session s, at the durable's home (subscriptions.Locks.Here when that is this node,
// Locks.At over a holder stream when not). The caller calls release when the subscription
// ends.
func (n *Node) lockDurable(s *session, name, shown string, standby bool, stop <-chan struct{}) (release func(), e *wire.Error) {
	if n.here.GroupNameTaken(name) {
		return nil, wire.Errorf(wire.CodeConflict, "%q is the name of a consumer group: a durable consumer needs a name of its own (subscribe as a member with the group's settings, or use another name)", shown)
	}
	client := s.conn.RemoteAddr().String()
	if home := n.consumerHome(name); home != n.cfg.Name {
		return n.locks.At(s.ctx, home, client, name, shown, standby, stop, func() { n.lockLost(s, name, shown, home) })
	}
	return n.locks.Here(n.cfg.Name, client, name, shown, standby, stop, s.ctx.Done())
}

// lockLost ends the subscriptions of session s under durable name (stored): the stream that
// held its lock at home ended without them letting go.
func (n *Node) lockLost(s *session, name, shown, home string) {
	e := wire.Errorf(wire.CodeUnavailable, "durable consumer %q: its lock at node %s of this region was lost (the node or the link to it went away): subscribe again", shown, home)
	for _, sub := range n.liveSubscriptions() {
		if sub.Conn() == s && sub.Request().Durable == name {
			sub.End(e)
		}
	}
}

// serveHold serves a HOLD from a node of this region: it takes the lock here and keeps it
// until the stream ends (subscriptions.Locks.ServeHold).
func (s *session) serveHold(str *quic.Stream, r *wire.Reader, f *wire.Hold) {
	n := s.n
	if !s.peer || s.peerRegion() != n.cfg.Region {
		s.failStream(str, wire.Errorf(wire.CodeForbidden, "HOLD is for the nodes of this region"))
		return
	}
	if !auth.ValidConsumerName(f.Name, true) {
		s.failStream(str, wire.Errorf(wire.CodeInvalidArgument, "durable name %q: want 1-400 characters of [A-Za-z0-9_./-]", f.Name))
		return
	}
	n.locks.ServeHold(s.ctx, str, r, f, s.peerName, s.failStream)
}
