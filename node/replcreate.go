package node

import (
	"context"
	"strings"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// serveReplicatedCreate answers TOPIC_CREATE in a replicated region. A client's has the
// region's metadata group place the topic (asking its leader when this node does not lead
// it); another node's is that ask, relayed here because this node leads the metadata group
// (replicated.askPlace): it is placed here or refused, never passed on. Both are answered
// with the topic's TOPIC_INFO, carrying its leader and replicas. A node's ask without
// options may carry many topics, one TOPIC_CREATE each (servePlaceBatch, replask.go). One with a retention of
// its own (or --update) is also configured through the topic's group leader.
func (s *session) serveReplicatedCreate(str *quic.Stream, rd *wire.Reader, f *wire.TopicCreate) {
	n := s.n
	topic := f.Topic
	switch {
	case s.peer && s.peerRegion() != n.cfg.Region:
		s.failStream(str, wire.Errorf(wire.CodeForbidden, "nodes of other regions do not create this region's topics"))
		return
	case s.peer && f.Flags == 0 && f.Replicas == 0:
		s.servePlaceBatch(str, rd, f) // replask.go: an ask of many topics
		return
	case !s.peer:
		if e := s.actor.CheckTopic(topic, false); e != nil {
			s.failStream(str, e)
			return
		}
		if e := s.actor.MayPublish(topic); e != nil {
			s.failStream(str, e)
			return
		}
		topic = s.actor.Topic(topic)
	}
	ctx, cancel := context.WithTimeout(s.ctx, n.cfg.ManageTimeout)
	defer cancel()
	existed := n.rep.placed(topic)
	want := int(min(f.Replicas, 1<<16))
	t, e := n.rep.ensureReplicas(ctx, topic, s.peer, want)
	if e != nil {
		s.failStream(str, e)
		return
	}
	if want != 0 && len(t.replicas) != want {
		// A topic's replica set is fixed when it is placed (no reassignment yet).
		s.failStream(str, wire.Errorf(wire.CodeInvalidArgument, "topic %q exists with %d replicas (%s), %d asked: a topic's replica count is set when it is created",
			s.actor.ClientName(topic), len(t.replicas), strings.Join(t.names(), ", "), want))
		return
	}
	var ti wire.TopicInfo
	if f.Flags&(wire.ManageRetention|wire.ManageUpdate) != 0 {
		// A retention of its own is replicated state: stored through the group's leader
		// (replretain.go).
		var e *wire.Error
		c := *f
		if !existed && !s.peer {
			c.Flags |= wire.ManageUpdate // placed by this request: its configuration is the one given
		}
		if ti, e = s.configureReplicated(ctx, topic, &c); e != nil {
			s.failStream(str, e)
			return
		}
	} else {
		ti = n.replTopicInfo(topic)
	}
	ti.Name = s.actor.ClientName(topic)
	w := wire.NewWriter(str)
	if w.Write(topicInfoFor(s.version, &ti)) == nil && w.Flush() == nil {
		str.Close()
	}
}
