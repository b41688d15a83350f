package node

import (
	"strconv"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// serveMember serves a SUBSCRIBE naming a group (authorized and counted by subscribe).
func (s *session) serveMember(str *quic.Stream, r *wire.Reader, req *wire.Subscribe, refuse func(*wire.Error)) {
	n := s.n
	gr := req.Group
	want, e := s.memberSettings(req)
	if e != nil {
		refuse(e)
		return
	}
	if n.place != nil && !s.peer {
		home, e := n.groupHome(s.ctx, req.Pattern, s.actor.Durable(gr.Name))
		if e != nil {
			refuse(e)
			return
		}
		if home != n.cfg.Name {
			s.relayMember(str, r, req, want.DeadLetter, home, refuse) // grouprelay.go
			return
		}
	}
	if e := s.groupTopicsHere(gr.Name, req.Pattern, want.DeadLetter); e != nil {
		refuse(e)
		return
	}
	if e := n.here.CheckNewGroup(s.groupActor(gr.Name), s.actor.Durable(gr.Name)); e != nil {
		refuse(e)
		return
	}
	if e := n.groups.Where.Barrier(s.ctx, s.actor.Durable(gr.Name), req.Pattern); e != nil { // node/groups.Replicated
		refuse(e)
		return
	}
	view := s.groupActor(gr.Name)
	m := groups.NewStream(n.groups, s.ctx, str, s.conn.RemoteAddr().String()+" stream "+strconv.FormatInt(int64(str.StreamID()), 10), s.actor, view)
	defer m.Close()
	g, e := n.joinGroup(s.actor.Durable(gr.Name), view.ClientDurable(s.actor.Durable(gr.Name)), req, want, m.Member())
	if e != nil {
		refuse(e)
		return
	}
	h := memberHandler{m}
	if !s.track(h) {
		n.leaveGroup(g, m.Member())
		refuse(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(h)
	n.metrics.subscriptions.Inc()
	defer n.metrics.subscriptions.Dec()
	err, ok := m.Serve(g, r)
	n.leaveGroup(g, m.Member()) // after the last ACKs are taken: what is left is handed out again
	if !ok {
		return
	}
	if err != nil {
		n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(err.Code), 10)).Inc()
	}
	m.End(err)
}

// memberHandler is a member's stream as the session's streamHandler.
type memberHandler struct{ *groups.Stream }

func (h memberHandler) drain() { h.Drain() }

// memberSettings checks a member's SUBSCRIBE (its group's name, no durable, no other
// region, its dead-letter topic) and returns the group settings it asks for.
func (s *session) memberSettings(req *wire.Subscribe) (wal.GroupSettings, *wire.Error) {
	n := s.n
	gr := req.Group
	// relayed by a node of the region (grouprelay.go): namespaced
	nameOK := func(name string) bool { return auth.ValidConsumerName(name, s.peer) }
	switch {
	case s.peer && s.peerRegion() != n.cfg.Region:
		return wal.GroupSettings{}, wire.Errorf(wire.CodeInvalidArgument, "group members are served in their own region; a group cannot be relayed from another region")
	case req.Durable != "" || (req.Region != "" && req.Region != n.cfg.Region):
		return wal.GroupSettings{}, wire.Errorf(wire.CodeInvalidArgument, "group %q: a group member names no durable consumer and no other region", gr.Name)
	case !nameOK(gr.Name):
		return wal.GroupSettings{}, wire.Errorf(wire.CodeInvalidArgument, "group name %q: want 1-255 characters of [A-Za-z0-9_.-]", gr.Name)
	}
	want := wal.GroupSettings{Pattern: req.Pattern, AckWait: gr.AckWait, MaxDeliver: gr.MaxDeliver, Order: gr.Order}
	if gr.DeadLetter == "" {
		return want, nil
	}
	if e := s.actor.CheckTopic(gr.DeadLetter, false); e != nil {
		return want, wire.Errorf(e.Code, "dead-letter topic: %s", e.Message)
	}
	want.DeadLetter = s.actor.Topic(gr.DeadLetter)
	if e := s.actor.MayPublish(gr.DeadLetter); e != nil { // the grant is in the client's names
		return want, wire.Errorf(e.Code, "dead-letter topic: %s", e.Message)
	}
	if routing.Match(req.Pattern, want.DeadLetter) {
		return want, wire.Errorf(wire.CodeInvalidArgument, "dead-letter topic %q matches the group's pattern: its records would come back to the group", gr.DeadLetter)
	}
	return want, nil
}

// groupTopicsHere refuses a group whose literal topics (its pattern's, its dead-letter
// topic) another node of a single-copy region owns: a group is served by its home, which
// must hold them.
func (s *session) groupTopicsHere(group, pattern, deadLetter string) *wire.Error {
	n := s.n
	if n.place == nil {
		return nil
	}
	for _, t := range []string{pattern, deadLetter} {
		switch {
		case t == "" || !routing.IsLiteral(t):
			continue
		case n.rep != nil && (t == deadLetter || n.rep.isReplicated(t)):
			// node/groups.Replicated: a replicated topic's group is served by its leader (groupHome
			// sent the member there), and dead-letter records go through raft.
			continue
		}
		o, e := n.place.Owner(s.ctx, t)
		if e != nil {
			return e
		}
		if o != n.cfg.Name {
			return wire.Errorf(wire.CodeUnavailable, "group %q: topic %q is owned by node %s of this region; a group is served by its home, which must hold its topics (the dead-letter topic too)",
				group, s.actor.ClientName(t), o)
		}
	}
	return nil
}
