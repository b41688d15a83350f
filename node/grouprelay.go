package node

import (
	"context"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/routing"
)

// One holder per region. A shared group's dispatch and an exclusive durable's lock are each
// decided by one node of the region, the consumer's home, whichever node its subscribers
// connect to:
//
//   - a group whose pattern is one topic lives on that topic's owner (it reads the log
//     there; a replicated topic's leader, which proposes the group's state: node/groups.Replicated);
//     any other group on the rendezvous winner of its name among the region's live nodes
//     (routing.Owner, as topics are placed), served from the topics that node holds;
//   - an exclusive durable's lock lives on the rendezvous winner of its name
//     (node/subscriptions, holder.go); the subscription itself is served as before by the node the client
//     connects to.
//
// A member connected to another node is relayed to the home over the region's peer link,
// one stream per member as for an upstream: the home serves it as a member of its live
// group, so every member of the region shares one dispatch and a record goes to one member.
// The relay (node/groups.Relay; this file picks the home, opens the stream and forwards the
// SUBSCRIBE) passes frames on as they are (the client's ACK, NAK and COMMIT up; the home's
// SUBSCRIBED, TOPIC, RECORD, COMMITTED and ERROR down, TOPIC names mapped to the client's
// view); it holds one frame at a time, so the client's flow control reaches the home's
// member stream (I5).
//
// The home follows the region's membership as gossip reports it: while two nodes disagree
// on it (a node joining, or failing and not yet reported), two homes can serve one consumer
// for that while. A failed home makes its groups and locks move to the next winner (liveness,
// not state: a group's state stays with the log it describes). A group of a replicated topic
// moves with its topic's leadership: the old home ends its members (CodeUnavailable, or
// their relay's link fails), they subscribe again and are sent to the new leader, which
// loads the group's replicated state.

// homeKey keeps consumer names apart from topics in the rendezvous (no topic has a space).
func homeKey(name string) string { return "consumer " + name }

// consumerHome is the node of this region that decides consumer name (stored): the
// rendezvous winner among the region's live nodes.
func (n *Node) consumerHome(name string) string {
	if n.place == nil {
		return n.cfg.Name
	}
	var names []string
	for _, m := range n.place.Members() {
		if m.Status == gossip.StatusAlive {
			names = append(names, m.Name)
		}
	}
	return routing.Owner(homeKey(name), names)
}

// groupHome is the node that serves group name (stored) with pattern (stored): the owner of
// a literal pattern's topic, else the consumer's home.
func (n *Node) groupHome(ctx context.Context, pattern, name string) (string, *wire.Error) {
	if routing.IsLiteral(pattern) {
		// A replicated topic's group lives on its leader, which proposes its state
		// (node/groups.Replicated); a single-copy topic's on its owner. "" is this node.
		home, e := n.topics.Owner(ctx, pattern, true)
		return cmpOr(home, n.cfg.Name), e
	}
	return n.consumerHome(name), nil
}

// groupActor is who a member of group name acts as for the tenant checks of a new group and
// the names of its messages and dead-letter headers: the session's principal, or for a
// member relayed by a peer the tenant its namespaced name says (the relaying node checked
// the grants).
func (s *session) groupActor(name string) *auth.Principal {
	if !s.peer {
		return s.actor
	}
	if tenant, _ := manage.SplitConsumer(name); tenant != "" {
		return auth.NewPrincipal(s.actor.Name, auth.Credential{Tenant: tenant})
	}
	return s.actor
}

// relayHandler is a relayed member as the session's streamHandler.
type relayHandler struct{ *groups.Relay }

func (h relayHandler) drain() { h.Drain() }

// relayMember serves a member (req authorized, in the node's names; deadLetter stored) by
// relaying its stream to home, which serves the group.
func (s *session) relayMember(str *quic.Stream, r *wire.Reader, req *wire.Subscribe, deadLetter, home string, refuse func(*wire.Error)) {
	n := s.n
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	rl := relayHandler{groups.NewRelay(cancel)}
	if !s.track(rl) {
		refuse(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(rl)
	up, err := n.fed.OpenStreamTo(ctx, home)
	if err != nil {
		refuse(wire.Errorf(wire.CodeUnavailable, "group %q is served by node %s of this region, which cannot be reached now: %v", req.Group.Name, home, err))
		return
	}
	fwd := *req
	g := *req.Group
	g.Name, g.DeadLetter = s.actor.Durable(g.Name), deadLetter
	fwd.Group, fwd.Region = &g, ""
	if _, err := up.Write(wire.Append(nil, &fwd)); err != nil {
		up.CancelRead(wire.AppCancelled)
		refuse(wire.Errorf(wire.CodeUnavailable, "group %q: relay to node %s: %v", req.Group.Name, home, err))
		return
	}
	n.metrics.subscriptions.Inc()
	defer n.metrics.subscriptions.Dec()
	stop := context.AfterFunc(ctx, func() {
		up.CancelRead(wire.AppCancelled)
		up.CancelWrite(wire.AppCancelled)
		str.CancelRead(wire.AppCancelled)
	})
	defer stop()
	e, ended, gone := rl.Serve(str, up, r, s.actor.ClientName, n.cfg.ReadAhead) // node/groups, relay.go
	switch {
	case e != nil:
		s.failStream(str, e)
	case ended:
		str.Close()
	case !gone && s.ctx.Err() == nil:
		s.failStream(str, wire.Errorf(wire.CodeUnavailable, "group %q: the link to node %s, which serves the group, failed: subscribe again", req.Group.Name, home))
	}
}
