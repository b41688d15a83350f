package node

import (
	"context"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// serveReplicatedCreate answers TOPIC_CREATE in a replicated region. A client's has the
// region's metadata group place the topic (asking its leader when this node does not lead
// it); another node's is that ask, relayed here because this node leads the metadata group
// (replicated.askPlace): it is placed here or refused, never passed on. Both are answered
// with the topic's TOPIC_INFO, carrying its leader and replicas.
func (s *session) serveReplicatedCreate(str *quic.Stream, f *wire.TopicCreate) {
	n := s.n
	topic := f.Topic
	switch {
	case s.peer && s.peerRegion() != n.cfg.Region:
		s.failStream(str, wire.Errorf(wire.CodeForbidden, "nodes of other regions do not create this region's topics"))
		return
	case !s.peer:
		if e := s.actor.checkTopic(topic, false); e != nil {
			s.failStream(str, e)
			return
		}
		if e := s.actor.mayPublish(topic); e != nil {
			s.failStream(str, e)
			return
		}
		topic = s.actor.topic(topic)
	}
	if f.Flags&(wire.ManageRetention|wire.ManageUpdate) != 0 {
		s.failStream(str, wire.Errorf(wire.CodeInvalidArgument,
			"topic %q: retention of its own is not built for replicated topics yet; the node's retention setting applies", f.Topic))
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, n.cfg.ManageTimeout)
	defer cancel()
	if _, e := n.rep.ensure(ctx, topic, s.peer); e != nil {
		s.failStream(str, e)
		return
	}
	ti := wire.TopicInfo{Name: s.actor.clientName(topic)}
	if first, next, ok := n.wal.Bounds(topic); ok {
		ti.First, ti.Next = first, next
	}
	ti.Leader, ti.Replicas = n.rep.holders(topic)
	w := wire.NewWriter(str)
	if w.Write(&ti) == nil && w.Flush() == nil {
		str.Close()
	}
}
