package node

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
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
// The relay passes frames on as they are (the client's ACK, NAK and COMMIT up; the home's
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

// memberRelay is one member relayed to its group's home.
type memberRelay struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	err    *wire.Error // set by drain or a bad client frame: sent to the client instead of the home's end
	gone   bool        // the client reset its stream: nothing more to tell it
}

func (m *memberRelay) drain() {
	m.mu.Lock()
	if m.err == nil {
		m.err = wire.Errorf(wire.CodeShuttingDown, "node shutting down")
	}
	m.mu.Unlock()
	m.cancel()
}

// relayMember serves a member (req authorized, in the node's names; deadLetter stored) by
// relaying its stream to home, which serves the group.
func (s *session) relayMember(str *quic.Stream, r *wire.Reader, req *wire.Subscribe, deadLetter, home string, refuse func(*wire.Error)) {
	n := s.n
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	rl := &memberRelay{cancel: cancel}
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
	upDone := make(chan struct{})
	go func() { // client -> home: ACK, NAK, COMMIT, then the client's FIN
		defer close(upDone)
		rl.toHome(r, up, cancel)
	}()
	ended := s.relayFromHome(str, up, cancel)
	cancel()
	<-upDone
	rl.mu.Lock()
	e, gone := rl.err, rl.gone
	rl.mu.Unlock()
	switch {
	case e != nil:
		s.failStream(str, e)
	case ended:
		str.Close()
	case !gone && s.ctx.Err() == nil:
		s.failStream(str, wire.Errorf(wire.CodeUnavailable, "group %q: the link to node %s, which serves the group, failed: subscribe again", req.Group.Name, home))
	}
}

// toHome copies the member's ACK, NAK and COMMIT frames to the home, then the client's FIN.
// A client gone or a frame a member may not send ends the relay (cancel), said in rl.
func (rl *memberRelay) toHome(r *wire.Reader, up *quic.Stream, cancel context.CancelFunc) {
	for {
		f, err := r.Read()
		if errors.Is(err, io.EOF) {
			up.Close()
			return
		}
		if err != nil {
			rl.mu.Lock()
			rl.gone = true
			rl.mu.Unlock()
			cancel()
			return
		}
		switch f.(type) {
		case *wire.Ack, *wire.Nak, *wire.Commit:
		default:
			rl.mu.Lock()
			rl.err = wire.Errorf(wire.CodeProtocol, "unexpected %s on a group member's stream: only ACK, NAK and COMMIT may follow SUBSCRIBE", f.Type())
			rl.mu.Unlock()
			cancel()
			return
		}
		if _, err := up.Write(wire.Append(nil, f)); err != nil {
			cancel()
			return
		}
	}
}

// relayFromHome copies the home's frames to the client, one frame at a time (a TOPIC's name
// in the client's namespace), flushing when the home has nothing more buffered or a
// read-ahead's worth waits. ended reports that the home ended the stream (FIN after its last
// frame, or an ERROR) and that all of it reached the client's stream.
func (s *session) relayFromHome(str, up *quic.Stream, cancel context.CancelFunc) (ended bool) {
	w := wire.NewWriter(str)
	hr := wire.NewReader(up, wire.Limits{})
	for {
		f, err := hr.Read()
		if errors.Is(err, io.EOF) {
			ended = true
			break
		}
		if err != nil {
			break
		}
		if t, ok := f.(*wire.Topic); ok {
			t.Name = strings.Clone(s.actor.ClientName(t.Name))
		}
		w.Buffer(f)
		if !hr.FrameBuffered() || w.Buffered() >= s.n.cfg.ReadAhead {
			if w.Flush() != nil {
				cancel()
				break
			}
		}
	}
	if w.Flush() != nil {
		ended = false
	}
	return ended
}
